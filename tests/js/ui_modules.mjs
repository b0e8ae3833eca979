// Run the viewer's pure modules (no DOM) on cases from Python, so their
// arithmetic can be checked against an independent model there.
//
//   node ui_modules.mjs CASES_JSON_PATH
//
// CASES is {"segments": [[text, highlights], ...], "filters": [form, ...]};
// prints {"segments": [[{text, mark}, ...], ...], "filters": [SessionFilter|null, ...]}.
import { readFileSync } from "node:fs";

import { segments } from "../../gateway/web/static/ui/highlight.js";
import { sessionFilter } from "../../gateway/web/static/ui/filters.js";
import { exportName, exportUrl } from "../../gateway/web/static/ui/export.js";

const cases = JSON.parse(readFileSync(process.argv[2], "utf8"));
const out = {
  segments: (cases.segments ?? []).map(([text, highlights]) => segments(text, highlights)),
  filters: (cases.filters ?? []).map((form) => sessionFilter(form)),
  exports: (cases.exports ?? []).map(([prefix, id, descendants]) => [
    exportUrl(prefix, id, descendants),
    exportName(id, descendants),
  ]),
};
process.stdout.write(`${JSON.stringify(out)}\n`);
