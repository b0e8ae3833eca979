// What the gateway that served this page can answer, asked once per page load.
//
// The page's queries name fields (titles, search, filters) that older gateways do
// not have, and GraphQL refuses a whole document for one unknown field; one
// introspection request lets the page leave out what is missing instead of
// failing every panel. When introspection itself fails, the page assumes the
// current contract (SPEC §12-§14) and no live tail (which needs a stream).

const Q_FEATURES = `query ViewerFeatures {
  __schema { queryType { fields { name args { name } } } subscriptionType { fields { name } } }
  session: __type(name: "Session") { fields { name } } }`;

export const CURRENT = Object.freeze({
  titles: true,
  sessionFilter: true,
  searchSessions: true,
  searchEvents: true,
  tail: false,
});

export async function detectFeatures(api) {
  let data;
  try {
    ({ data } = await api.request(Q_FEATURES));
  } catch (error) {
    if (error?.status === 401) throw error; // the caller asks for a token
    return CURRENT;
  }
  const fields = new Map((data.__schema.queryType?.fields ?? []).map((f) => [f.name, f]));
  const sessionFields = new Set((data.session?.fields ?? []).map((f) => f.name));
  const subscriptions = data.__schema.subscriptionType?.fields ?? [];
  return Object.freeze({
    titles: sessionFields.has("title"),
    sessionFilter: Boolean(fields.get("sessions")?.args.some((a) => a.name === "filter")),
    searchSessions: fields.has("searchSessions"),
    searchEvents: fields.has("searchEvents"),
    tail: subscriptions.some((f) => f.name === "sessionEvents"),
  });
}
