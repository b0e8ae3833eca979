// The export links of the open session (SPEC §15): its dsh JSONL artifact, and a
// zip with its descendants.
//
// Without auth they are plain links the browser downloads by itself (streamed to
// disk, whatever the size). With auth a link cannot send the Authorization
// header, so a click fetches the export with the page's token and saves the bytes
// through a Blob URL (`connect-src 'self'` allows the fetch; a blob: download is
// no navigation a Content-Security-Policy governs).

// The file name a download gets: the id with every character outside
// [A-Za-z0-9_-] written "_" (as the zip names its entries).
export function exportName(sessionId, descendants) {
  const safe = sessionId.replace(/[^A-Za-z0-9_-]/gu, "_") || "session";
  return descendants ? `${safe}.zip` : `${safe}.jsonl`;
}

export function exportUrl(prefix, sessionId, descendants) {
  const base = `${prefix.replace(/\/$/, "")}/${encodeURIComponent(sessionId)}/export`;
  return descendants ? `${base}?descendants=true` : base;
}

function nameFrom(disposition, fallback) {
  const m = /filename="?([^";]+)"?/i.exec(disposition ?? "");
  return m ? m[1].replace(/[\\/]/g, "_") : fallback;
}

// Fetch `link.href` with the token and hand the bytes to the browser as a download.
export async function downloadWithToken(api, link) {
  const response = await fetch(link.href, {
    headers: api.headers("application/x-ndjson, application/zip, application/json"),
    credentials: "same-origin",
  });
  if (!response.ok) {
    let text = `HTTP ${response.status}`;
    try {
      const body = await response.json();
      text = body?.errors?.map((e) => e.message).join("; ") || body?.error || text;
    } catch {
      // not JSON: the status says enough
    }
    const error = new Error(text);
    error.status = response.status;
    throw error;
  }
  const blob = await response.blob();
  const url = URL.createObjectURL(blob);
  const save = document.createElement("a");
  save.href = url;
  save.download = nameFrom(response.headers.get("content-disposition"), link.getAttribute("download"));
  save.hidden = true;
  document.body.append(save);
  save.click();
  save.remove();
  // The download has its bytes once the click is handled; free them a little later.
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
  return blob.size;
}
