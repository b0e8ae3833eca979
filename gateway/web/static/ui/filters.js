// The session filters form as a `SessionFilter` input (SPEC §12).
//
// A field left empty is left out (it does not constrain). The dates are whole
// days in UTC, the zone every time on the page is shown in: `from` is the first
// millisecond of its day and `to` the last of its day, since the ranges are
// inclusive. The two checkboxes are the `availability` list: both ticked is no
// clause at all, one ticked is that one, none is the empty list, which the
// contract says matches nothing (and the page says so).

const DAY_MS = 86_400_000;

// Epoch ms of 00:00:00.000Z on the date an <input type="date"> holds ("YYYY-MM-DD").
export function dayStart(value) {
  const m = /^(\d{4,})-(\d{2})-(\d{2})$/.exec(value ?? "");
  if (!m) return null;
  const ms = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  return Number.isFinite(ms) ? ms : null;
}

// The filter the form asks for, or null when it asks for nothing.
export function sessionFilter({ cwd, from, to, live, persisted }) {
  const filter = {};
  if (cwd !== "") filter.cwd = [cwd];
  const start = dayStart(from);
  const endDay = dayStart(to);
  if (start !== null || endDay !== null) {
    filter.createdAt = {};
    if (start !== null) filter.createdAt.from = start;
    if (endDay !== null) filter.createdAt.to = endDay + DAY_MS - 1;
  }
  if (!(live && persisted)) filter.availability = [...(live ? ["LIVE"] : []), ...(persisted ? ["PERSISTED"] : [])];
  return Object.keys(filter).length ? filter : null;
}

// One line saying what the filter keeps (for the form's summary).
export function describe(filter) {
  if (!filter) return "";
  const parts = [];
  if (filter.cwd) parts.push(`cwd ${filter.cwd[0]}`);
  if (filter.createdAt) {
    const day = (ms) => new Date(ms).toISOString().slice(0, 10);
    const { from, to } = filter.createdAt;
    parts.push(`created ${from !== undefined ? day(from) : "…"} to ${to !== undefined ? day(to) : "…"}`);
  }
  if (filter.availability) parts.push(filter.availability.length ? filter.availability.join(" or ").toLowerCase() : "neither live nor persisted: nothing");
  return parts.join(" · ");
}
