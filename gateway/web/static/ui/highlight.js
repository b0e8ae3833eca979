// A search snippet with its matches marked, built as DOM nodes from the API's
// `highlights` ({start, length} in code points of the snippet).
//
// JavaScript strings index UTF-16 code units, so a highlight past an emoji (or
// any character outside the BMP) would land one unit early per such character if
// its numbers were used as string offsets; they are converted first. The snippet
// is never parsed for markers and never goes through innerHTML: every piece is a
// text node, the matches wrapped in <mark>.

// UTF-16 offset of every code-point position 0..n of `text` (n + 1 entries).
export function codeUnitOffsets(text) {
  const offsets = [0];
  let unit = 0;
  for (const ch of text) {
    unit += ch.length;
    offsets.push(unit);
  }
  return offsets;
}

// [{text, mark}] covering `text` in order: the highlighted pieces have mark true.
// Highlights are clipped to the text; an overlapping or empty one adds nothing
// (the API never sends those; a page should not break if one came).
export function segments(text, highlights) {
  const offsets = codeUnitOffsets(text);
  const points = offsets.length - 1;
  const ranges = [...(highlights ?? [])]
    .map((h) => [Math.max(0, Math.min(points, h.start)), Math.max(0, Math.min(points, h.start + h.length))])
    .sort((a, b) => a[0] - b[0]);
  const out = [];
  let at = 0; // code points
  for (const [start, end] of ranges) {
    if (start < at || end <= start) continue;
    if (start > at) out.push({ text: text.slice(offsets[at], offsets[start]), mark: false });
    out.push({ text: text.slice(offsets[start], offsets[end]), mark: true });
    at = end;
  }
  if (at < points || out.length === 0) out.push({ text: text.slice(offsets[at]), mark: false });
  return out;
}

// A <span class="snippet"> holding `text` with its highlights in <mark> elements.
export function markedSnippet(text, highlights) {
  const span = document.createElement("span");
  span.className = "snippet";
  for (const piece of segments(text, highlights)) {
    if (piece.mark) {
      const mark = document.createElement("mark");
      mark.textContent = piece.text;
      span.append(mark);
    } else span.append(document.createTextNode(piece.text));
  }
  return span;
}
