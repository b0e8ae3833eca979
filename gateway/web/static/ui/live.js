// Live tail: the `sessionEvents` subscription over GraphQL-over-SSE ("distinct
// connections": a POST to /graphql with `Accept: text/event-stream`, answered
// with `event: next` frames, then `event: complete`).
//
// Read with fetch's streaming body rather than EventSource, which can only GET
// and cannot send the Authorization header a token needs. Written by hand rather
// than vendoring the graphql-sse client: the page needs one subscription in one
// mode, which is this much frame parsing, and no bundler to pull a package in.
// Whether the gateway serves the subscription at all is asked with the page's
// other features (features.js).

const SUBSCRIPTION = `subscription ViewerTail($id: ID!, $after: Int) {
  sessionEvents(sessionId: $id, afterSeq: $after) {
    seq type time surface surfaceOp { kind start end } replacedEvents { seq } } }`;

function* frames(buffer) {
  // Yields [event, data] for each complete frame; the caller keeps the rest.
  let start = 0;
  for (;;) {
    const end = buffer.text.indexOf("\n\n", start);
    if (end < 0) break;
    const block = buffer.text.slice(start, end);
    start = end + 2;
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue; // keep-alive comment
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (data.length || event !== "message") yield [event, data.join("\n")];
  }
  buffer.text = buffer.text.slice(start);
}

// Follows `sessionId` after `afterSeq` until the stream completes or `signal` aborts.
// `onEvent(ev)` gets each event; resumes by itself after SUBSCRIPTION_LAGGED.
// Resolves to "complete" or "aborted"; rejects on a transport or GraphQL error.
export async function tail(api, sessionId, afterSeq, onEvent, signal) {
  let after = afterSeq;
  for (;;) {
    const response = await fetch(api.endpoint, {
      method: "POST",
      headers: api.headers("text/event-stream"),
      body: JSON.stringify({ query: SUBSCRIPTION, variables: { id: sessionId, after } }),
      credentials: "same-origin",
      signal,
    }).catch((error) => {
      if (signal.aborted) return null;
      throw error;
    });
    if (!response) return "aborted";
    if (!response.ok || !(response.headers.get("content-type") ?? "").includes("text/event-stream")) {
      throw new Error(`live tail refused: HTTP ${response.status}`);
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const buffer = { text: "" };
    let lagged = null;
    try {
      read: for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer.text += decoder.decode(value, { stream: true }).replace(/\r\n/g, "\n");
        for (const [event, data] of frames(buffer)) {
          if (event === "complete") break read;
          if (event !== "next") continue;
          const payload = JSON.parse(data);
          const errors = payload.errors ?? [];
          const lag = errors.find((e) => e.extensions?.code === "SUBSCRIPTION_LAGGED");
          if (lag) lagged = lag.extensions.lastSeq;
          else if (errors.length) throw new Error(errors.map((e) => e.message).join("; "));
          const ev = payload.data?.sessionEvents;
          if (ev) {
            after = ev.seq;
            onEvent(ev);
          }
        }
      }
    } catch (error) {
      if (signal.aborted) return "aborted";
      throw error;
    } finally {
      reader.cancel().catch(() => {});
    }
    if (lagged === null) return "complete";
    after = Math.max(after, lagged);
  }
}
