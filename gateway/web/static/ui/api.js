// GraphQL over HTTP to the gateway that served this page (same origin only).
//
// The bearer token (when the gateway wants one) lives in sessionStorage: it is
// gone when the tab closes and is never written anywhere else.

const TOKEN_KEY = "session-gateway.token"; // the key GraphiQL's token field uses too
const ACCEPT = "application/graphql-response+json, application/json";

export class ApiError extends Error {
  constructor(message, status, code) {
    super(message);
    this.status = status;
    this.code = code ?? null;
  }
}

export class Api {
  constructor(endpoint, authOn) {
    this.endpoint = endpoint;
    this.authOn = authOn;
  }

  get token() {
    try {
      return sessionStorage.getItem(TOKEN_KEY);
    } catch {
      return null;
    }
  }

  setToken(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  }

  forgetToken() {
    sessionStorage.removeItem(TOKEN_KEY);
  }

  headers(accept = ACCEPT) {
    const headers = { "Content-Type": "application/json", Accept: accept };
    const token = this.authOn ? this.token : null;
    if (token) headers.Authorization = `Bearer ${token}`;
    return headers;
  }

  // Resolves to {data, errors}; rejects with ApiError when there is no data at all.
  async request(query, variables = {}) {
    let response;
    try {
      response = await fetch(this.endpoint, {
        method: "POST",
        headers: this.headers(),
        body: JSON.stringify({ query, variables }),
        credentials: "same-origin",
      });
    } catch (error) {
      throw new ApiError(`cannot reach the gateway: ${error.message}`, 0);
    }
    let body = null;
    try {
      body = await response.json();
    } catch {
      throw new ApiError(`HTTP ${response.status}: the gateway did not answer JSON`, response.status);
    }
    const errors = Array.isArray(body?.errors) ? body.errors : [];
    const code = errors[0]?.extensions?.code ?? null;
    if (response.status === 401 || code === "UNAUTHENTICATED") {
      throw new ApiError(errors[0]?.message ?? "a bearer token is needed", 401, "UNAUTHENTICATED");
    }
    if (!body || body.data == null) {
      const message = errors.map((e) => e.message).join("; ") || `HTTP ${response.status}`;
      throw new ApiError(message, response.status, code);
    }
    return { data: body.data, errors };
  }
}
