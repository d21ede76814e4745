// Writes the CommonJS build of the package from its ES module, and the
// CommonJS types from the ES module's:
//
//   reprise.js   -> reprise.cjs    (the module, for require())
//   reprise.d.ts -> reprise.d.cts  (its types, for require())
//
// reprise.js stays the one source: reprise serves it at /reprise.js and
// the package's "import" condition points at it. It imports nothing and
// exports only declarations (export class/function/const NAME, and
// export default NAME;), so the CommonJS build is the same text with the
// export keywords taken off and an exports assignment at the end; any
// other import or export form is refused rather than translated.
//
//   node build.mjs          write reprise.cjs and reprise.d.cts
//   node build.mjs --check  exit 1 if they are not what it would write
//
// No dependencies: Node 18+. `npm pack` runs the check (prepack), and
// tests/node_client_test.go runs it too.
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

const dir = fileURLToPath(new URL(".", import.meta.url));
const header = (from) => `// Generated from ${from} by build.mjs (node build.mjs): do not edit.\n`;

/**
 * The CommonJS text of an ES module that imports nothing and exports only
 * declarations.
 * @param {string} src
 * @returns {string}
 */
export function commonJS(src) {
  const names = [];
  let def = null;
  const lines = src.split("\n").map((line, i) => {
    const where = `reprise.js:${i + 1}`;
    if (/^\s*import\b(?!\()/.test(line)) throw new Error(`${where}: an import: the CommonJS build supports none`);
    const decl = /^export ((?:async )?function\*? |class |const |let )([A-Za-z_$][\w$]*)/.exec(line);
    if (decl) {
      names.push(decl[2]);
      return line.slice("export ".length);
    }
    const d = /^export default ([A-Za-z_$][\w$]*);$/.exec(line);
    if (d) {
      def = d[1];
      return null;
    }
    if (/^\s*export\b/.test(line)) throw new Error(`${where}: an export form the CommonJS build does not know: ${line.trim()}`);
    return line;
  });
  if (names.length === 0) throw new Error("reprise.js: no exports");
  const body = lines.filter((l) => l !== null).join("\n").trimEnd();
  const exports = names.map((n) => `exports.${n} = ${n};`);
  if (def !== null) exports.push(`exports.default = ${def};`);
  return (
    header("reprise.js") +
    '"use strict";\n' +
    'Object.defineProperty(exports, "__esModule", { value: true });\n\n' +
    body +
    "\n\n" +
    exports.join("\n") +
    "\n"
  );
}

/** The outputs, by file name. */
export function outputs() {
  return {
    "reprise.cjs": commonJS(readFileSync(dir + "reprise.js", "utf8")),
    "reprise.d.cts": header("reprise.d.ts") + readFileSync(dir + "reprise.d.ts", "utf8"),
  };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const check = process.argv.includes("--check");
  let stale = 0;
  for (const [name, text] of Object.entries(outputs())) {
    let old = null;
    try {
      old = readFileSync(dir + name, "utf8");
    } catch {}
    if (old === text) continue;
    if (check) {
      console.error(`web/client/${name} is not up to date with its source: run node web/client/build.mjs`);
      stale++;
    } else {
      writeFileSync(dir + name, text);
      console.log(`wrote web/client/${name}`);
    }
  }
  process.exitCode = stale > 0 ? 1 : 0;
}
