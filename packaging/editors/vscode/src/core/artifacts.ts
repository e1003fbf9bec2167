// Files a session touched, and what a file looked like when the session last wrote or
// read it, so an `artifact_changed` can be shown as a diff against that content.

import * as fs from "node:fs";
import * as path from "node:path";
import type { AgentEvent } from "./client";

export interface Change {
  uri: string;
  path: string;
  /** The content when the session last recorded the file (or it last changed);
   *  `undefined` if unknown, then there is nothing to diff against. */
  before: string | undefined;
}

/** Largest file kept as a baseline for diffs. */
export const MAX_BASELINE_BYTES = 2 * 1024 * 1024;

export class ArtifactTracker {
  private baselines = new Map<string, string>();

  constructor(readonly workspace: string) {}

  resolve(uri: string): string {
    return path.isAbsolute(uri) ? uri : path.join(this.workspace, uri);
  }

  private read(file: string): string | undefined {
    try {
      const st = fs.statSync(file);
      if (!st.isFile() || st.size > MAX_BASELINE_BYTES) return undefined;
      return fs.readFileSync(file, "utf8");
    } catch {
      // Deleted or unreadable: no baseline.
      return undefined;
    }
  }

  private snapshot(file: string): void {
    const now = this.read(file);
    if (now === undefined) this.baselines.delete(file);
    else this.baselines.set(file, now);
  }

  /** Feeds an event; returns a change to show for `artifact_changed`. */
  onEvent(ev: AgentEvent): Change | undefined {
    if (ev.type === "tool_result") {
      const arts = Array.isArray(ev.data.artifacts) ? (ev.data.artifacts as Record<string, unknown>[]) : [];
      for (const a of arts) {
        if (a.kind === "file" && typeof a.uri === "string") this.snapshot(this.resolve(a.uri));
      }
      return undefined;
    }
    if (ev.type === "artifact_changed") {
      const uri = String(ev.data.uri ?? "");
      const p = typeof ev.data.path === "string" ? ev.data.path : this.resolve(uri);
      const before = this.baselines.get(p);
      const now = this.read(p);
      // The watch can report the session's own write (even before its tool result
      // arrives); a file whose content did not move from the baseline has nothing to show.
      if (before !== undefined && now === before) return undefined;
      // The next change diffs against this one.
      if (now === undefined) this.baselines.delete(p);
      else this.baselines.set(p, now);
      return { uri, path: p, before };
    }
    return undefined;
  }
}

/** The workspace files a checkpoint says the session read, modified or produced. */
export function touchedFiles(checkpoint: Record<string, unknown>): string[] {
  const out = new Set<string>();
  const add = (v: unknown) => {
    if (typeof v === "string" && v && !v.startsWith("resource:") && !v.startsWith("command:")) out.add(v);
  };
  for (const k of ["files_modified", "files_read", "recent_artifacts"]) {
    const v = checkpoint[k];
    if (Array.isArray(v)) v.forEach(add);
  }
  const arts = checkpoint.artifacts;
  if (arts && typeof arts === "object") {
    for (const [k, a] of Object.entries(arts as Record<string, Record<string, unknown>>)) {
      if (!a || a.kind === "file") add(k);
    }
  }
  return [...out].sort();
}
