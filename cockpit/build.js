// Builds the Cockpit page into dist/ (or $OUT): esbuild bundles src/index.jsx with React and
// PatternFly into index.js and index.css; index.html and manifest.json are copied. cockpit.js
// is not bundled: the page loads Cockpit's own (../base1/cockpit.js), so it follows the
// installed Cockpit (287 and later).
import * as esbuild from "esbuild";
import fs from "node:fs";
import path from "node:path";

const out = process.env.OUT || "dist";
fs.rmSync(out, { recursive: true, force: true });
fs.mkdirSync(out, { recursive: true });
const t0 = Date.now();
await esbuild.build({
    entryPoints: ["src/index.jsx"],
    bundle: true,
    outdir: out,
    entryNames: "index",
    assetNames: "assets/[name]-[hash]",
    format: "iife",
    target: ["es2020"],
    minify: process.env.NODE_ENV !== "development",
    sourcemap: false,
    legalComments: "external",
    jsx: "automatic",
    loader: { ".woff": "file", ".woff2": "file", ".ttf": "file", ".otf": "file", ".eot": "file", ".svg": "file", ".png": "file", ".jpg": "file", ".gif": "file" },
    define: { "process.env.NODE_ENV": '"production"' },
    logLevel: "warning",
});
for (const f of ["index.html", "manifest.json"])
    fs.copyFileSync(path.join("src", f), path.join(out, f));
// esbuild writes a legal-comments file per output even when it has none to keep.
for (const f of fs.readdirSync(out)) {
    if (f.endsWith(".LEGAL.txt") && fs.statSync(path.join(out, f)).size === 0)
        fs.rmSync(path.join(out, f));
}
console.log(`cockpit: built ${out}/ in ${Date.now() - t0} ms`);
