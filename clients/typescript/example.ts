// Recall from Strata with plain fetch, typed from openapi/openapi.json (docs/clients.md):
//   npm ci && npm run generate && npm run check
import type { components, paths } from "./schema";

type RecallOperation = paths["/v1/recall"]["post"];
type RecallRequest = RecallOperation["requestBody"]["content"]["application/json"];
type RecallResponse = RecallOperation["responses"][200]["content"]["application/json"];
type Problem = components["schemas"]["Problem"];

export class StrataError extends Error {
  constructor(readonly problem: Problem) {
    super(`${problem.status} ${problem.code}: ${problem.detail}`);
  }
}

export async function recall(
  baseUrl: string,
  body: RecallRequest,
  apiKey?: string,
): Promise<RecallResponse> {
  const response = await fetch(`${baseUrl}/v1/recall`, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}),
    },
    body: JSON.stringify(body),
  });
  if (!response.ok) {
    // Every error is application/problem+json with a stable `code`.
    throw new StrataError((await response.json()) as Problem);
  }
  return (await response.json()) as RecallResponse;
}

export async function main(baseUrl = "http://127.0.0.1:8000"): Promise<void> {
  const found = await recall(baseUrl, {
    user_id: "ana",
    query: "Which city did I move to?",
    top_k: 3,
  });
  for (const result of found.results) {
    const source = result.sources[0];
    console.log(result.score.toFixed(3), result.content, source?.message_id ?? "-");
  }
}
