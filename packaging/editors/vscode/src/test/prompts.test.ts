// Steer and queue from the editor (src/core/prompts.ts) against a real daemon, and the
// manifest's commands against what the extension registers.

import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import type { AgentEvent } from "../core/client";
import { newRequestId, sendInput } from "../core/prompts";
import { loadHistory, Transcript } from "../core/transcript";
import { TestDaemon, waiter } from "../testlib/daemon";

const T = 30000;

/**
 * A script whose fallback answer streams for about six seconds (time to steer and
 * queue while it runs); a steered or queued prompt gets an answer naming it.
 */
function script(d: TestDaemon): string {
  const p = path.join(d.root, "steer.json");
  fs.writeFileSync(
    p,
    JSON.stringify({
      rules: [
        { match: "also mention the tests", steps: [{ text: "Steered: the tests too." }] },
        { match: "queued question", steps: [{ text: "Answer to the queued question." }] },
        { steps: [{ text: "A slow first answer, streamed in small pieces.", chunk_chars: 2, delay_ms: 250 }] },
      ],
    }),
  );
  return p;
}

describe("steer and queue against a real daemon", () => {
  let d: TestDaemon;
  before(() => {
    d = new TestDaemon();
  });
  after(async () => {
    await d.dispose();
  });

  test("input steered into a running turn and a prompt queued behind it each run once, in order", async () => {
    const c = d.client();
    const { session_id: sid } = await c.request<{ session_id: string }>("agentd/create", {
      workspace: d.workspace,
      model: `script:${script(d)}`,
    });
    const seen: AgentEvent[] = [];
    const firstDelta = waiter<AgentEvent>((e) => e.type === "text_delta", T, "the first answer streaming");
    let queuedEnded: ReturnType<typeof waiter<AgentEvent>> | undefined;
    const t = new Transcript(sid);
    await c.follow(sid, 0, (ev) => {
      seen.push(ev);
      t.apply(ev);
      firstDelta.feed(ev);
      queuedEnded?.feed(ev);
    });

    const first = await sendInput(c, sid, "tell me something", "turn", { permissionMode: "auto" });
    assert.equal(first.outcome, "started");
    await firstDelta.done;

    const queued = await sendInput(c, sid, "the queued question", "queue", { permissionMode: "auto" });
    assert.equal(queued.outcome, "queued", queued.message);
    assert.notEqual(queued.turnId, first.turnId);
    queuedEnded = waiter<AgentEvent>(
      (e) => e.type === "turn_ended" && e.data?.turn_id === queued.turnId,
      T,
      "the queued turn's end",
    );

    // Answered once the steer is recorded, right before the running turn's next call.
    const steered = await sendInput(c, sid, "also mention the tests", "steer");
    assert.equal(steered.outcome, "steered", steered.message);
    assert.equal(steered.turnId, first.turnId);
    assert.equal(typeof steered.seq, "number");
    const end = await queuedEnded.done;
    assert.equal(end.data?.status, "completed");

    const { events } = await c.request<{ events: AgentEvent[] }>("agentd/events", { session_id: sid });
    const users = events.filter((e) => e.type === "user_message").map((e) => [e.data?.text, e.data?.steer === true]);
    assert.deepEqual(users, [
      ["tell me something", false],
      ["also mention the tests", true],
      ["the queued question", false],
    ]);
    const answers = events.filter((e) => e.type === "assistant_message").map((e) => e.data?.text);
    assert.deepEqual(answers, [
      "A slow first answer, streamed in small pieces.",
      "Steered: the tests too.",
      "Answer to the queued question.",
    ]);
    const ends = events.filter((e) => e.type === "turn_ended").map((e) => [e.data?.turn_id, e.data?.status]);
    assert.deepEqual(ends, [
      [first.turnId, "completed"],
      [queued.turnId, "completed"],
    ]);
    // The transcript shows the steer as such and the prompt as queued, live and when
    // loaded from the Log.
    const again = new Transcript(sid);
    await loadHistory(c, again, 100);
    for (const html of [t.html(), again.html()]) {
      assert.match(html, /You \(steered into the running turn\)<\/div><pre>also mention the tests/);
      assert.match(html, /queued: the queued question/);
    }
    c.close();
  });

  test("a steer whose connection drops while it waits is sent again with its id and recorded once", async () => {
    const c = d.client();
    const { session_id: sid } = await c.request<{ session_id: string }>("agentd/create", {
      workspace: d.workspace,
      model: `script:${script(d)}`,
    });
    const firstDelta = waiter<AgentEvent>((e) => e.type === "text_delta", T, "the first answer streaming");
    const pending = waiter<AgentEvent>((e) => e.type === "status" && e.data?.steer_pending === true, T, "the steer waiting");
    const ended = waiter<AgentEvent>((e) => e.type === "turn_ended", T, "turn_ended");
    await c.follow(sid, 0, (ev) => {
      firstDelta.feed(ev);
      pending.feed(ev);
      ended.feed(ev);
    });
    const first = await sendInput(c, sid, "tell me something", "turn", { permissionMode: "auto" });
    await firstDelta.done;
    const steer = sendInput(c, sid, "also mention the tests", "steer");
    await pending.done;
    c.dropConnection();
    const s = await steer;
    assert.equal(s.outcome, "steered", s.message);
    assert.equal(s.turnId, first.turnId);
    const end = await ended.done;
    assert.equal(end.data?.status, "completed");
    const { events } = await c.request<{ events: AgentEvent[] }>("agentd/events", { session_id: sid });
    const steers = events.filter((e) => e.type === "user_message" && e.data?.steer === true);
    assert.deepEqual(
      steers.map((e) => [e.data?.text, e.seq]),
      [["also mention the tests", s.seq]],
    );
    c.close();
  });

  test("a steer with no turn running starts the input as a turn; a resent id is admitted once", async () => {
    const c = d.client();
    const { session_id: sid } = await c.request<{ session_id: string }>("agentd/create", {
      workspace: d.workspace,
      model: `script:${script(d)}`,
    });
    const ended = waiter<AgentEvent>((e) => e.type === "turn_ended", T, "turn_ended");
    await c.follow(sid, 0, (ev) => ended.feed(ev));
    const s = await sendInput(c, sid, "the queued question", "steer", { permissionMode: "auto" });
    assert.equal(s.outcome, "started", s.message);
    const end = await ended.done;
    assert.equal(end.data?.turn_id, s.turnId);

    // A retry with the same id (a connection that dropped before the answer) answers the
    // turn already admitted instead of starting a second one.
    const id = newRequestId();
    const one = await sendInput(c, sid, "the queued question once", "queue", { requestId: id });
    const two = await sendInput(c, sid, "the queued question once", "queue", { requestId: id });
    assert.equal(two.turnId, one.turnId);
    await assert.rejects(
      sendInput(c, sid, "other text", "queue", { requestId: id }),
      (e: Error & { kind?: string }) => e.kind === "conflict",
    );
    const { events } = await c.request<{ events: AgentEvent[] }>("agentd/events", { session_id: sid });
    const admitted = events.filter(
      (e) => (e.type === "turn_started" || e.type === "turn_queued") && e.data?.client_request_id === id,
    );
    assert.ok(admitted.length > 0);
    assert.deepEqual([...new Set(admitted.map((e) => e.data?.turn_id))], [one.turnId]);
    const prompts = events.filter((e) => e.type === "user_message" && e.data?.text === "the queued question once");
    assert.ok(prompts.length <= 1, JSON.stringify(prompts));
    c.close();
  });
});

test("every command the manifest declares is registered by the extension, and back", () => {
  const root = path.resolve(__dirname, "../..");
  const manifest = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"));
  const declared = new Set<string>(manifest.contributes.commands.map((c: { command: string }) => c.command));
  const code = fs.readFileSync(path.join(root, "out", "extension.js"), "utf8");
  const registered = new Set([...code.matchAll(/reg\("(agentd\.[A-Za-z]+)"/g)].map((m) => m[1]));
  assert.deepEqual([...registered].sort(), [...declared].sort());
  for (const c of ["agentd.steer", "agentd.queue"]) assert.ok(declared.has(c), c);
  const inline = manifest.contributes.menus["view/item/context"].filter(
    (m: { command: string; group: string }) => m.command === "agentd.steer" && m.group === "inline",
  );
  assert.equal(inline.length, 1, "Steer is an inline action of a running session, as Interrupt is");
  assert.match(inline[0].when, /viewItem == session\.running/);
});
