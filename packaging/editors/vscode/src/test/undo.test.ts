// "Show Diff" and "Undo Turn" against a real daemon in a real git workspace: the diff of
// the last turn and of the session, an undo that restores the files, a conflict that
// names the user's edited file and changes nothing, a forced undo after it, and the
// user's own repository left as it was.

import { strict as assert } from "node:assert";
import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { after, before, describe, test } from "node:test";
import { lastChangingTurn, sessionDiff, undoTurn } from "../core/undo";
import { TestDaemon } from "../testlib/daemon";

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", args, {
    cwd,
    encoding: "utf8",
    env: {
      ...process.env,
      GIT_AUTHOR_NAME: "t",
      GIT_AUTHOR_EMAIL: "t@example.com",
      GIT_COMMITTER_NAME: "t",
      GIT_COMMITTER_EMAIL: "t@example.com",
      GIT_CONFIG_GLOBAL: "/dev/null",
    },
  });
}

describe("diff and undo turn against a real daemon", () => {
  let d: TestDaemon;
  before(() => {
    d = new TestDaemon();
  });
  after(async () => {
    await d.dispose();
  });

  test("undo turn reverts the last turn, then the one before; a conflict needs force", async () => {
    const ws = d.workspace;
    const read = (f: string) => (fs.existsSync(path.join(ws, f)) ? fs.readFileSync(path.join(ws, f), "utf8") : null);
    git(ws, "init", "-q");
    fs.writeFileSync(path.join(ws, "a.txt"), "orig\n");
    git(ws, "add", "a.txt");
    git(ws, "commit", "-q", "-m", "init");
    const head = git(ws, "rev-parse", "HEAD");
    const script = path.join(d.root, "undo.json");
    const write = (p: string, content: string) => ({ name: "write_file", args: { path: p, content } });
    fs.writeFileSync(
      script,
      JSON.stringify({
        rules: [
          {
            match: "one",
            steps: [
              { tool_calls: [write("a.txt", "agent1\n"), { name: "shell", args: { command: "echo new > n.txt" } }] },
              { text: "one done" },
            ],
          },
          { match: "two", steps: [{ tool_calls: [write("a.txt", "agent2\n")] }, { text: "two done" }] },
          { match: "look", steps: [{ tool_calls: [{ name: "list_dir", args: { path: "." } }] }, { text: "seen" }] },
        ],
      }),
    );
    const c = d.client();
    await c.start();
    const { session_id: sid } = await c.request<{ session_id: string }>("agentd/create", {
      workspace: ws,
      model: `script:${script}`,
    });
    assert.equal(await lastChangingTurn(c, sid), undefined);
    assert.deepEqual(await undoTurn(c, sid), { kind: "nothing" });
    for (const input of ["one", "two", "look"]) {
      const r = await c.request<{ status: string }>("agentd/turn", { session_id: sid, input });
      assert.equal(r.status, "completed");
    }

    // The last turn that changed files is "two" (the read-only "look" changed nothing).
    const turn = await sessionDiff(c, sid, "turn");
    assert.deepEqual(
      turn.files.map((f) => [f.path, f.status]),
      [["a.txt", "modified"]],
    );
    assert.match(turn.diff, /-agent1\n\+agent2\n/);
    const whole = await sessionDiff(c, sid, "session");
    assert.deepEqual(
      whole.files.map((f) => [f.path, f.status]),
      [
        ["a.txt", "modified"],
        ["n.txt", "added"],
      ],
    );
    assert.match(whole.diff, /-orig\n\+agent2\n/);

    const u1 = await undoTurn(c, sid);
    assert.equal(u1.kind, "reverted");
    assert.deepEqual(u1.kind === "reverted" && u1.files, ["a.txt"]);
    assert.equal(read("a.txt"), "agent1\n");
    assert.equal(read("n.txt"), "new\n");

    // The user edits a file the next undo would restore: refused, nothing changes.
    fs.writeFileSync(path.join(ws, "a.txt"), "user edit\n");
    const u2 = await undoTurn(c, sid);
    assert.equal(u2.kind, "conflict");
    assert.deepEqual(u2.kind === "conflict" && u2.conflicts, ["a.txt"]);
    assert.equal(read("a.txt"), "user edit\n");
    assert.equal(read("n.txt"), "new\n");

    // Confirmed: forced, to the same seq.
    const forced = await undoTurn(c, sid, { force: true, toSeq: u2.kind === "conflict" ? u2.toSeq : -1 });
    assert.equal(forced.kind, "reverted");
    assert.equal(read("a.txt"), "orig\n");
    assert.equal(read("n.txt"), null);
    assert.deepEqual(await undoTurn(c, sid), { kind: "nothing" });

    // The user's repository: same HEAD, clean status, no stash.
    assert.equal(git(ws, "rev-parse", "HEAD"), head);
    assert.equal(git(ws, "status", "--porcelain"), "");
    assert.equal(git(ws, "stash", "list"), "");
    c.close();
  });
});
