// The recipe panel (tl.recipes): the view of one recipe report (recipe/view.js), redrawn on
// every payload push (overfit_one_batch's live chart while it trains).
import { mountPanel } from "../shared/panel.js";
import { recipeView } from "./recipe/view.js";

function render(/** @type {any} */ props) {
  return mountPanel(props, recipeView, { name: "recipe", render });
}

export default { render };
