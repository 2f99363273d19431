#!/usr/bin/env node
// Checks index.d.ts against the module it describes: it compiles under --strict, and its value exports
// (functions, constants) are exactly what index.js exports. Prints what differs; exit 1 if anything does.
'use strict';

const path = require('path');
const ts = require('typescript');

const root = path.resolve(__dirname, '..');
const declarations = path.join(root, 'index.d.ts');
const program = ts.createProgram([declarations], { noEmit: true, strict: true, types: [] });
const problems = ts.getPreEmitDiagnostics(program).map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));

const checker = program.getTypeChecker();
const moduleSymbol = checker.getSymbolAtLocation(program.getSourceFile(declarations));
const declared = checker.getExportsOfModule(moduleSymbol)
  .filter((s) => {
    const target = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s;
    return (target.flags & ts.SymbolFlags.Value) !== 0;
  })
  .map((s) => s.name);
const exported = Object.keys(require(root));

for (const name of exported.filter((n) => !declared.includes(n))) problems.push(`index.js exports ${name}; index.d.ts does not declare it`);
for (const name of declared.filter((n) => !exported.includes(n))) problems.push(`index.d.ts declares ${name}; index.js does not export it`);
for (const p of problems) console.error(`check_types: ${p}`);
if (problems.length === 0) console.log(`index.d.ts: compiles (strict), declares the ${exported.length} exports of index.js`);
process.exit(problems.length === 0 ? 0 : 1);
