// The findings card: the panel of every report without a panel of its own.
import { reportCard } from "../shared/card.js";
import { mountPanel } from "../shared/panel.js";

/** @param {{ model: import("@anywidget/types").AnyModel<any>, el: HTMLElement }} props */
function render(props) {
  return mountPanel(props, (payload, ctx) => reportCard(payload, ctx), { name: "report", render });
}

export default { render };
