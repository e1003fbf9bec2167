// The transcript model on its own: patches, clipping, failures.

import { strict as assert } from "node:assert";
import { test } from "node:test";
import { MAX_OUTPUT_CHARS, Transcript } from "../core/transcript";

const ev = (type: string, data: Record<string, unknown>, seq?: number) => ({ session_id: "s", type, data, seq });

test("deltas between two reads become one append; later deltas one replace", () => {
  const t = new Transcript("s");
  t.apply(ev("user_message", { text: "hi" }, 1));
  t.apply(ev("text_delta", { text: "Hel" }));
  t.apply(ev("text_delta", { text: "lo" }));
  let p = t.takePatches();
  assert.deepEqual(p.map((x) => x.op), ["append", "append"]);
  assert.match(p[1].html, /assistant streaming[\s\S]*<pre>Hello<\/pre>/);
  t.apply(ev("text_delta", { text: " there" }));
  t.apply(ev("text_delta", { text: "!" }));
  p = t.takePatches();
  assert.equal(p.length, 1);
  assert.equal(p[0].op, "replace");
  assert.match(p[0].html, /Hello there!/);
  t.apply(ev("assistant_message", { text: "Hello there!" }, 2));
  p = t.takePatches();
  assert.equal(p.length, 1);
  assert.doesNotMatch(p[0].html, /streaming/);
  assert.match(p[0].html, /data-seq="2"/);
  // A replayed durable event is ignored.
  t.apply(ev("user_message", { text: "again" }, 2));
  assert.equal(t.takePatches().length, 0);
});

test("huge tool output is clipped; failures and interrupted turns show", () => {
  const t = new Transcript("s");
  t.apply(ev("tool_call", { call_id: "c", name: "read_file", args: { path: "<x>" } }, 1));
  t.apply(ev("tool_result", { call_id: "c", ok: false, output: "y".repeat(MAX_OUTPUT_CHARS + 10) }, 2));
  t.apply(ev("turn_ended", { turn_id: "t", status: "interrupted" }, 3));
  t.apply(ev("turn_failed", { terminal_status: "failed", error_kind: "rate_limited", error_message: "slow down" }, 4));
  const html = t.html();
  assert.match(html, /tool read_file · failed/);
  assert.match(html, /&lt;x&gt;/);
  assert.match(html, /… \(10 more characters\)/);
  assert.match(html, /turn interrupted/);
  assert.match(html, /turn failed: rate_limited: slow down/);
  assert.equal(t.running, false);
});
