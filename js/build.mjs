// Bundle every js/panels/<name>.js into one self-contained ES module
// torchlens_nb/widgets/static/<name>.js (anywidget loads `_esm` from a Blob URL, where relative
// imports cannot resolve), the offline boot script into static/_offline.js, and the theme
// (shared/theme.css, then any panels/<name>.css) into static/theme.css.
// New panel files are picked up automatically. Nothing here reaches the network.
import * as esbuild from "esbuild";
import { mkdir, readdir, readFile, rm, writeFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const outdir = path.resolve(here, "../torchlens_nb/widgets/static");
const panelsDir = path.join(here, "panels");

const files = await readdir(panelsDir);
const panels = files.filter((f) => f.endsWith(".js")).sort();
const panelCss = files.filter((f) => f.endsWith(".css")).sort();
if (panels.length === 0) throw new Error(`no panel modules in ${panelsDir}`);

await mkdir(outdir, { recursive: true });

const result = await esbuild.build({
  entryPoints: [
    ...panels.map((f) => ({ in: path.join(panelsDir, f), out: path.basename(f, ".js") })),
    { in: path.join(here, "offline.js"), out: "_offline" },
  ],
  outdir,
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  legalComments: "none",
  metafile: true,
  logLevel: "warning",
});

// Self-contained check: no output may import anything at load time.
for (const [file, meta] of Object.entries(result.metafile.outputs)) {
  const external = meta.imports.filter((i) => i.external);
  if (external.length) throw new Error(`${file} imports ${external.map((i) => i.path).join(", ")}; bundle it instead`);
}

// Drop outputs of panels that no longer exist (never wipe the folder: tests may be reading it).
const produced = new Set([
  ...Object.keys(result.metafile.outputs).map((f) => path.basename(f)),
  "theme.css",
  "_manifest.json",
]);
for (const f of await readdir(outdir)) if (!produced.has(f)) await rm(path.join(outdir, f));

const css = [await readFile(path.join(here, "shared", "theme.css"), "utf8")];
for (const f of panelCss) css.push(`/* ${f} */\n${await readFile(path.join(panelsDir, f), "utf8")}`);
await writeFile(path.join(outdir, "theme.css"), css.join("\n"));

// The manifest says which package version these bundles were built for (the version has one
// home, pyproject.toml) and which panels they hold: tl.report.doctor() compares both with the
// installed Python package.
const pyproject = await readFile(path.resolve(here, "../pyproject.toml"), "utf8");
const version = /^version\s*=\s*"([^"]+)"/m.exec(pyproject)?.[1];
if (!version) throw new Error("no version = \"...\" line in pyproject.toml [project]");
const manifest = { version, panels: panels.map((f) => path.basename(f, ".js")) };
await writeFile(path.join(outdir, "_manifest.json"), `${JSON.stringify(manifest, null, 1)}\n`);

for (const [file, meta] of Object.entries(result.metafile.outputs)) {
  console.log(`${path.relative(path.resolve(here, ".."), file)}  ${(meta.bytes / 1024).toFixed(1)} KiB`);
}
console.log(`torchlens_nb/widgets/static/theme.css  ${(css.join("\n").length / 1024).toFixed(1)} KiB`);
