// Which theme the host page shows, so a panel follows the notebook's theme and not the OS
// setting: JupyterLab marks body[data-jp-theme-light], VS Code body.vscode-dark/-light (and
// -high-contrast / -high-contrast-light), marimo
// body.dark-theme/.light-theme. The panel gets data-tln-theme="dark" | "light" (theme.css picks
// the fallback palette from it; inside marimo's shadow DOM a body selector cannot reach the
// panel, an attribute on the panel itself can). No mark: the OS preference decides.

/**
 * @param {Document} doc
 * @returns {"dark" | "light" | null}
 */
export function hostTheme(doc) {
  const body = doc.body;
  if (!body) return null;
  const jp = body.dataset.jpThemeLight;
  if (jp === "true" || jp === "false") return jp === "true" ? "light" : "dark";
  const marks = [...body.classList, ...doc.documentElement.classList];
  // VS Code's light high-contrast theme carries vscode-high-contrast too: light wins
  if (marks.includes("vscode-high-contrast-light")) return "light";
  if (marks.some((c) => c === "vscode-dark" || c === "vscode-high-contrast" || c === "dark-theme")) return "dark";
  if (marks.some((c) => c === "vscode-light" || c === "light-theme")) return "light";
  return null;
}

/**
 * Keep `el`'s data-tln-theme equal to the host's theme, also when the user switches it;
 * the observer stops when `signal` aborts.
 * @param {HTMLElement} el
 * @param {AbortSignal} signal
 */
export function followHostTheme(el, signal) {
  const doc = el.ownerDocument;
  const apply = () => {
    const theme = hostTheme(doc);
    if (theme) el.dataset.tlnTheme = theme;
    else delete el.dataset.tlnTheme;
  };
  apply();
  const observer = new MutationObserver(apply);
  const options = { attributes: true, attributeFilter: ["class", "data-jp-theme-light"] };
  observer.observe(doc.documentElement, options);
  if (doc.body) observer.observe(doc.body, options);
  signal.addEventListener("abort", () => observer.disconnect(), { once: true });
}
