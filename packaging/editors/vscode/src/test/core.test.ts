// The extension's core against a real daemon: every wait is on an event or a response
// with a deadline.

import { strict as assert } from "node:assert";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import type { AgentEvent, ClientState } from "../core/client";
import { ArtifactTracker, touchedFiles } from "../core/artifacts";
import { createHash } from "node:crypto";
import { PendingImages } from "../core/images";
import { decide, describe as describePermission } from "../core/permission";
import { nodeView, SessionTree } from "../core/sessions";
import { loadHistory, Patch, Transcript } from "../core/transcript";
import { example, TestDaemon, waiter } from "../testlib/daemon";

const T = 20000;

async function create(d: TestDaemon, c: ReturnType<TestDaemon["client"]>, script?: string): Promise<string> {
  const p: Record<string, unknown> = { workspace: d.workspace };
  if (script) p.model = `script:${example(script)}`;
  const r = await c.request<{ session_id: string }>("agentd/create", p);
  return r.session_id;
}

describe("agentd core against a real daemon", () => {
  let d: TestDaemon;
  before(() => {
    d = new TestDaemon();
  });
  after(async () => {
    await d.dispose();
  });

  test("connects through agentctl socket-path with Content-Length framing", async () => {
    const c = d.client();
    await c.start();
    assert.equal(c.state, "connected");
    assert.equal(c.socketPath, d.socket);
    const hello = await c.request<{ server: string; protocol_version: number }>("agentd/hello", {});
    assert.equal(hello.server, "agentd");
    // A daemon error keeps its kind.
    await assert.rejects(
      c.request("agentd/show", { session_id: "no-such-session" }),
      (e: Error & { kind?: string }) => e.kind === "not_found" && /not_found/.test(e.message),
    );
    c.close();
  });

  test("a transcript streams deltas, collapses tool calls and escapes text", async () => {
    fs.writeFileSync(path.join(d.workspace, "README.md"), "hi\n");
    const c = d.client();
    const sid = await create(d, c, "hello.json");
    const t = new Transcript(sid);
    await loadHistory(c, t, 100);
    assert.equal(t.lastSeq, 0);
    t.takePatches();
    const patches: Patch[] = [];
    const ended = waiter<AgentEvent>((e) => e.type === "turn_ended", T, "turn_ended");
    await c.follow(sid, t.lastSeq, (ev) => {
      t.apply(ev);
      patches.push(...t.takePatches());
      ended.feed(ev);
    });
    const r = await c.request<{ status: string }>("agentd/turn", { session_id: sid, input: "<b>what</b> is here?" });
    assert.equal(r.status, "completed");
    await ended.done;

    const html = t.html();
    assert.match(html, /&lt;b&gt;what&lt;\/b&gt; is here\?/);
    assert.doesNotMatch(html, /<b>what/);
    assert.match(html, /<details class="tool ok"[^>]*><summary>tool list_dir · ok<\/summary>/);
    assert.match(html, /README\.md/);
    assert.match(html, /Those are the files at the top of your workspace\./);
    assert.doesNotMatch(html, /streaming/);
    // The answer streamed: an assistant item was replaced while still streaming, with
    // only part of the text.
    const partial = patches.filter((p) => p.op === "replace" && p.html.includes("assistant streaming"));
    assert.ok(partial.length >= 2, `streamed replacements: ${JSON.stringify(patches.map((p) => p.op))}`);
    assert.ok(!partial[0].html.includes("involved."), partial[0].html);
    // Durable events came once each, in order.
    const seqs = t.items.map((i) => i.seq).filter((s): s is number => s !== undefined);
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b));
    c.close();
  });

  test("an attached image goes with the next prompt; a text file is refused", async () => {
    // A real 1x1 PNG, and a text file named like one.
    const png = Buffer.from(
      "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
      "base64",
    );
    fs.writeFileSync(path.join(d.workspace, "shot.png"), png);
    fs.writeFileSync(path.join(d.workspace, "fake.png"), "just text\n");
    const c = d.client();
    const sid = await create(d, c, "hello.json");
    const images = new PendingImages();
    assert.throws(
      () => images.attach(sid, ["shot.png", "fake.png"], d.workspace),
      /image fake\.png: not a PNG, JPEG, GIF or WebP image/,
    );
    assert.deepEqual(images.list(sid), [], "nothing attached when a file is refused");
    assert.throws(() => images.attach(sid, ["gone.png"], d.workspace), /image gone\.png: ENOENT/);
    images.attach(sid, ["shot.png"], d.workspace);
    assert.equal(images.describe(sid), "1 image: shot.png");
    assert.deepEqual(images.list(sid), [{ path: path.join(d.workspace, "shot.png"), mime: "image/png", bytes: png.length }]);

    const t = new Transcript(sid);
    const ended = waiter<AgentEvent>((e) => e.type === "turn_ended", T, "turn_ended");
    await c.follow(sid, 0, (ev) => {
      t.apply(ev);
      ended.feed(ev);
    });
    const params = images.turnParams(sid, { session_id: sid, input: "what is on it?" });
    const r = await c.request<{ status: string }>("agentd/turn", params);
    assert.equal(r.status, "completed");
    images.clear(sid);
    await ended.done;
    const evs = await c.request<{ events: AgentEvent[] }>("agentd/events", { session_id: sid });
    const user = evs.events.find((e) => e.type === "user_message");
    assert.deepEqual((user?.data as Record<string, unknown>).images, [
      { sha256: createHash("sha256").update(png).digest("hex"), mime: "image/png", bytes: png.length },
    ]);
    assert.match(t.html(), /what is on it\?\n\[image: image\/png, 70 bytes\]/);
    // Sent once: the next prompt goes without it.
    assert.deepEqual(images.turnParams(sid, { session_id: sid, input: "again" }), { session_id: sid, input: "again" });
    c.close();
  });

  test("permission requests become questions; only a yes allows", async () => {
    const asked: string[] = [];
    let answer: boolean | undefined = true;
    const c = d.client({
      onPermission: (req) =>
        decide(req, async (q) => {
          asked.push(q.title);
          return answer;
        }),
    });
    const sid = await create(d, c, "write.json");
    const t = new Transcript(sid);
    const ended = () => waiter<AgentEvent>((e) => e.type === "turn_ended", T, "turn_ended");
    let w = ended();
    await c.follow(sid, 0, (ev) => {
      t.apply(ev);
      w.feed(ev);
    }, { permissions: true });
    const file = path.join(d.workspace, "notes.txt");
    fs.rmSync(file, { force: true });

    await c.request("agentd/turn", { session_id: sid, input: "write", permission_mode: "ask" });
    await w.done;
    assert.deepEqual(asked, ["agentd: allow write_file notes.txt?"]);
    assert.ok(fs.existsSync(file), "allowed write did not happen");
    assert.match(t.html(), /tool write_file · ok · allow \(client_allowed\)/);

    fs.rmSync(file);
    answer = undefined; // a dismissed dialog
    w = ended();
    await c.request("agentd/turn", { session_id: sid, input: "write", permission_mode: "ask" });
    await w.done;
    assert.equal(asked.length, 2);
    assert.ok(!fs.existsSync(file), "a dismissed prompt allowed the write");
    assert.match(t.html(), /tool write_file · failed · deny/);
    c.close();
  });

  test("the session tree shows forks and live status", async () => {
    const c = d.client();
    const sid = await create(d, c, "slow.json");
    await c.request("agentd/append", {
      session_id: sid,
      events: [{ type: "user_message", data: { text: "one" } }, { type: "assistant_message", data: { text: "two" } }],
    });
    const fork = await c.request<{ child_session_id: string }>("agentd/fork", { session_id: sid, to_seq: 1 });
    const tree = new SessionTree(c, d.workspace);
    await tree.reload();
    const root = tree.get(sid);
    assert.ok(root, "root session in the tree");
    assert.equal(root.children.length, 1);
    assert.equal(root.children[0].sessionId, fork.child_session_id);
    assert.equal(root.children[0].forkedToSeq, 1);
    assert.equal(root.status, "idle");

    const running = waiter<unknown>(() => tree.get(sid)?.status === "running", T, "status running");
    const idle = waiter<unknown>(() => tree.get(sid)?.status === "idle", T * 2, "status idle");
    tree.onChange((n) => {
      running.feed(n);
      idle.feed(n);
    });
    await c.request("agentd/turn", { session_id: sid, input: "story", wait: false });
    await running.done;
    await c.request("agentd/interrupt", { session_id: sid });
    await idle.done;
    await tree.dispose();
    c.close();
  });

  test("a subagent sits under its parent, tagged, and the transcripts link the two", async () => {
    // A script whose model delegates with the `task` tool; the child answers its brief.
    const script = path.join(d.root, "delegate.json");
    fs.writeFileSync(
      script,
      JSON.stringify({
        rules: [
          { match: "Count the notes", steps: [{ text: "three notes" }] },
          {
            steps: [
              { tool_calls: [{ name: "task", args: { prompt: "Count the notes", title: "note counter" } }] },
              { text: "the helper counted" },
            ],
          },
        ],
      }),
    );
    const c = d.client();
    const sid = (
      await c.request<{ session_id: string }>("agentd/create", { workspace: d.workspace, model: `script:${script}` })
    ).session_id;
    const r = await c.request<{ status: string; output_text: string }>("agentd/turn", {
      session_id: sid,
      input: "delegate",
      permission_mode: "auto",
    });
    assert.equal(r.status, "completed");
    assert.equal(r.output_text, "the helper counted");

    const tree = new SessionTree(c, d.workspace);
    await tree.reload();
    const root = tree.get(sid);
    assert.ok(root, "the parent in the tree");
    assert.equal(root.relation, undefined);
    assert.equal(root.children.length, 1);
    const child = root.children[0];
    assert.equal(child.relation, "subagent");
    assert.equal(child.parentSessionId, sid);
    assert.equal(child.parentCallId, "call_1_0_0");
    const view = nodeView(child);
    assert.equal(view.label, "note counter");
    assert.match(view.description, /^subagent · idle · \d+ events$/);
    assert.ok(view.tooltip.includes(`subagent of ${sid} (task call_1_0_0)`), view.tooltip);
    assert.doesNotMatch(nodeView(root).description, /subagent/);

    // The parent's transcript names the child on the task's result; the child's says
    // whose subagent it is.
    const pt = new Transcript(sid);
    await loadHistory(c, pt, 100);
    assert.match(pt.html(), new RegExp(`tool task · ok · subagent ${child.sessionId}</summary>`));
    assert.match(pt.html(), /three notes/);
    const ct = new Transcript(child.sessionId);
    await loadHistory(c, ct, 100);
    assert.match(ct.html(), new RegExp(`subagent of ${sid} \\(task call_1_0_0\\)`));
    assert.match(ct.html(), /Count the notes/);
    await tree.dispose();
    c.close();
  });

  test("a huge session loads in pages without blocking the event loop", async () => {
    const c = d.client();
    const sid = await create(d, c);
    const N = 3000;
    for (let i = 0; i < N; i += 500) {
      const events = Array.from({ length: 500 }, (_, k) => ({ type: "user_message", data: { text: `m${i + k}` } }));
      await c.request("agentd/append", { session_id: sid, events });
    }
    const t = new Transcript(sid);
    let pages = 0;
    let ticked = false;
    setImmediate(() => {
      ticked = true;
    });
    let tickedBeforeEnd = false;
    await loadHistory(c, t, 400, () => {
      pages++;
      if (ticked) tickedBeforeEnd = true;
    });
    assert.equal(t.items.length, N);
    assert.equal(t.lastSeq, N);
    assert.ok(pages >= Math.ceil((N + 1) / 400), `pages: ${pages}`);
    assert.ok(tickedBeforeEnd, "the loader never yielded to the event loop");
    assert.equal(t.takePatches().length, N);
    c.close();
  });

  test("artifact_changed gives a diff against what the session wrote; touched files list", async () => {
    const c = d.client();
    const sid = await create(d, c, "write.json");
    const tracker = new ArtifactTracker(d.workspace);
    const file = path.join(d.workspace, "notes.txt");
    fs.rmSync(file, { force: true });
    const ended = waiter<AgentEvent>((e) => e.type === "turn_ended", T, "turn_ended");
    // The watch may also report the tool's own write, before any baseline exists; the
    // change to wait for is the user's edit, diffed against what the tool wrote.
    const changed = waiter<unknown>(
      (x) => (x as { before?: string } | undefined)?.before !== undefined,
      T,
      "artifact_changed with a baseline",
    );
    await c.follow(sid, 0, (ev) => {
      ended.feed(ev);
      changed.feed(tracker.onEvent(ev));
    });
    await c.request("agentd/turn", { session_id: sid, input: "write", permission_mode: "auto" });
    await ended.done;
    fs.writeFileSync(file, "edited by the user\n");
    const ch = (await changed.done) as { uri: string; path: string; before?: string };
    assert.equal(ch.uri, "notes.txt");
    assert.equal(ch.path, file);
    assert.equal(ch.before, "written by the script provider\n");
    const cp = await c.request<{ checkpoint: Record<string, unknown> }>("agentd/checkpoint", { session_id: sid });
    assert.deepEqual(touchedFiles(cp.checkpoint), ["notes.txt"]);
    c.close();
  });

  test("a daemon restart and a dropped connection resume with no gap and no duplicate", async () => {
    const c = d.client();
    const states: { s: ClientState; detail?: string }[] = [];
    c.on("state", (s: ClientState, detail?: string) => states.push({ s, detail }));
    const sid = await create(d, c);
    const seqs: number[] = [];
    let upTo = waiter<number>((s) => s === 2, T, "seq 2");
    await c.follow(sid, 0, (ev) => {
      if (ev.seq !== undefined) {
        seqs.push(ev.seq);
        upTo.feed(ev.seq);
      }
    });
    const append = async (via: ReturnType<TestDaemon["client"]>, text: string) =>
      via.request("agentd/append", { session_id: sid, events: [{ type: "user_message", data: { text } }] });
    await append(c, "a");
    await append(c, "b");
    await upTo.done;

    // The daemon stops: the client says so, reconnects through agentctl (which starts a
    // new daemon) and resubscribes after seq 2.
    const back = new Promise<void>((resolve) => c.once("reconnected", resolve));
    await d.stop();
    await back;
    const lost = states.find((x) => x.s === "disconnected");
    assert.ok(lost?.detail, `no disconnect message: ${JSON.stringify(states)}`);
    const other = d.client();
    upTo = waiter<number>((s) => s === 4, T, "seq 4");
    await append(other, "c");
    await append(other, "d");
    await upTo.done;

    // A dropped socket while another client appends: whatever was missed is caught up.
    upTo = waiter<number>((s) => s === 7, T, "seq 7");
    c.dropConnection();
    await append(other, "e");
    await append(other, "f");
    await append(other, "g");
    await upTo.done;
    assert.deepEqual(seqs, [1, 2, 3, 4, 5, 6, 7]);
    c.close();
    other.close();
  });

  test("a lagged notice resubscribes after the last delivered seq", async () => {
    const c = d.client();
    const sid = await create(d, c);
    const seqs: number[] = [];
    let upTo = waiter<number>((s) => s === 3, T, "seq 3");
    const f = await c.follow(sid, 0, (ev) => {
      if (ev.seq !== undefined) {
        seqs.push(ev.seq);
        upTo.feed(ev.seq);
      }
    });
    await c.request("agentd/append", {
      session_id: sid,
      events: ["a", "b", "c"].map((text) => ({ type: "user_message", data: { text } })),
    });
    await upTo.done;
    // As if seqs 2 and 3 had been lost when the daemon dropped the subscription.
    f.lastSeq = 1;
    const first = f.subscription;
    upTo = waiter<number>((s) => s === 3, T, "seq 3 again");
    f.deliver({ session_id: sid, type: "lagged", data: { missed: 2 } });
    await upTo.done;
    assert.deepEqual(seqs, [1, 2, 3, 2, 3]);
    assert.notEqual(f.subscription, first);
    c.close();
  });

  test("permission questions name the tool and its target", () => {
    const q = describePermission({
      session_id: "s",
      call_id: "c1",
      tool: "run_command",
      args: { command: "rm -rf build" },
    });
    assert.equal(q.title, "agentd: allow run_command: rm -rf build?");
    assert.match(q.detail, /call c1/);
  });
});
