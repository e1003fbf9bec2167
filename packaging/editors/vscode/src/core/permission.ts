// Turning an `agentd/permission` request into a yes/no question and a decision. The
// question itself (a modal dialog in the editor) is injected.

import type { Decision, PermissionRequest } from "./client";

export interface Question {
  title: string;
  detail: string;
}

export function describe(req: PermissionRequest): Question {
  const args = (req.args ?? {}) as Record<string, unknown>;
  const target = typeof args.path === "string"
    ? ` ${args.path}`
    : typeof args.command === "string"
      ? `: ${args.command}`
      : "";
  let detail = JSON.stringify(req.args, null, 2) ?? "";
  if (detail.length > 2000) detail = `${detail.slice(0, 2000)}\n…`;
  return {
    title: `agentd: allow ${req.tool}${target}?`,
    detail: `Session ${req.session_id}, call ${req.call_id}\n${detail}`,
  };
}

/**
 * Asks `ask` and maps its answer: `true` allows, anything else (a dismissed dialog, an
 * error) denies, so no answer can ever allow a tool.
 */
export async function decide(
  req: PermissionRequest,
  ask: (q: Question) => Promise<boolean | undefined>,
): Promise<Decision> {
  try {
    return (await ask(describe(req))) === true ? "allow" : "deny";
  } catch {
    return "deny";
  }
}
