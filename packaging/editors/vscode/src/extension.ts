// VS Code glue: views, commands, dialogs. The logic lives in ./core (tested against a
// real daemon); this file only maps it onto the editor's UI.

import * as vscode from "vscode";
import { ArtifactTracker, touchedFiles } from "./core/artifacts";
import { agentctlSocketPath, AgentdClient, ClientState, Follow } from "./core/client";
import { IMAGE_EXTENSIONS, PendingImages } from "./core/images";
import { decide } from "./core/permission";
import { SendHow, sendInput } from "./core/prompts";
import { nodeView, SessionNode, SessionTree } from "./core/sessions";
import { escapeHtml, loadHistory, Transcript } from "./core/transcript";
import { sessionDiff, undoTurn } from "./core/undo";

let client: AgentdClient | undefined;
let output: vscode.OutputChannel;
let status: vscode.StatusBarItem;
/** Images attached to each session's next prompt. */
const pending = new PendingImages();

function cfg<T>(key: string, dflt: T): T {
  return vscode.workspace.getConfiguration("agentd").get<T>(key, dflt);
}

function workspaceDir(): string | undefined {
  return vscode.workspace.workspaceFolders?.[0]?.uri.fsPath;
}

function log(msg: string): void {
  output.appendLine(`[${new Date().toISOString()}] ${msg}`);
}

async function reportError(what: string, e: unknown): Promise<void> {
  const msg = e instanceof Error ? e.message : String(e);
  log(`${what}: ${msg}`);
  const pick = await vscode.window.showErrorMessage(`agentd: ${what}: ${msg}`, "Show Output");
  if (pick) output.show(true);
}

// ---- Sessions view -------------------------------------------------------------------

class SessionsProvider implements vscode.TreeDataProvider<SessionNode> {
  private emitter = new vscode.EventEmitter<SessionNode | undefined>();
  readonly onDidChangeTreeData = this.emitter.event;

  constructor(readonly tree: SessionTree) {
    tree.onChange((n) => this.emitter.fire(n));
  }

  getTreeItem(n: SessionNode): vscode.TreeItem {
    const view = nodeView(n);
    const item = new vscode.TreeItem(
      view.label,
      n.children.length ? vscode.TreeItemCollapsibleState.Expanded : vscode.TreeItemCollapsibleState.None,
    );
    item.description = view.description;
    item.tooltip = view.tooltip;
    const idle = n.relation === "subagent" ? "hubot" : "comment-discussion";
    item.iconPath = new vscode.ThemeIcon(n.status === "running" ? "sync~spin" : idle);
    item.contextValue = n.status === "running" ? "session.running" : "session.idle";
    item.command = { command: "agentd.openSession", title: "Open", arguments: [n] };
    return item;
  }

  getChildren(n?: SessionNode): SessionNode[] {
    return n ? n.children : this.tree.roots;
  }
}

// ---- Transcript panels ---------------------------------------------------------------

class TranscriptPanel {
  static open = new Map<string, TranscriptPanel>();
  private follow: Follow | undefined;
  private transcript: Transcript;
  private tracker: ArtifactTracker;
  private flushScheduled = false;

  static async show(c: AgentdClient, sessionId: string, workspace: string): Promise<TranscriptPanel> {
    const existing = TranscriptPanel.open.get(sessionId);
    if (existing) {
      existing.panel.reveal();
      return existing;
    }
    const p = new TranscriptPanel(c, sessionId, workspace);
    TranscriptPanel.open.set(sessionId, p);
    await p.start();
    return p;
  }

  private constructor(
    private readonly c: AgentdClient,
    readonly sessionId: string,
    workspace: string,
    readonly panel = vscode.window.createWebviewPanel(
      "agentd.transcript",
      `agentd ${sessionId}`,
      vscode.ViewColumn.Active,
      { enableScripts: true, retainContextWhenHidden: true },
    ),
  ) {
    this.transcript = new Transcript(sessionId);
    this.tracker = new ArtifactTracker(workspace);
    panel.webview.html = page(sessionId);
    panel.onDidDispose(() => {
      TranscriptPanel.open.delete(sessionId);
      void this.follow?.close();
    });
    panel.webview.onDidReceiveMessage((m: { type: string; seq?: number }) => {
      if (m.type === "fork" && typeof m.seq === "number") {
        void vscode.commands.executeCommand("agentd.fork", { sessionId, forkedToSeq: undefined }, m.seq);
      }
    });
  }

  private async start(): Promise<void> {
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: `agentd: loading ${this.sessionId}` },
      async (progress) => {
        await loadHistory(this.c, this.transcript, cfg("pageSize", 500), (n) => {
          progress.report({ message: `${n} events` });
          this.flush();
        });
      },
    );
    this.follow = await this.c.follow(this.sessionId, this.transcript.lastSeq, (ev) => {
      this.transcript.apply(ev);
      const change = this.tracker.onEvent(ev);
      if (change) void showChange(change.path, change.before, this.sessionId);
      this.scheduleFlush();
    }, { permissions: true });
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    // Coalesce bursts of deltas into one message to the webview.
    setTimeout(() => {
      this.flushScheduled = false;
      this.flush();
    }, 30);
  }

  private flush(): void {
    const patches = this.transcript.takePatches();
    if (patches.length) void this.panel.webview.postMessage({ type: "patches", patches });
  }
}

function page(sessionId: string): string {
  const nonce = Math.random().toString(36).slice(2);
  return `<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-${nonce}';">
<style>
body{font-family:var(--vscode-font-family);font-size:var(--vscode-font-size);color:var(--vscode-foreground)}
pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font-family:var(--vscode-editor-font-family)}
.msg{margin:8px 0;padding:4px 8px;border-left:3px solid var(--vscode-panel-border)}
.user{border-color:var(--vscode-charts-blue)} .assistant{border-color:var(--vscode-charts-green)}
.who{font-weight:bold;opacity:.8} .notice{opacity:.7;font-style:italic;margin:6px 0}
details.tool{margin:6px 0;padding:2px 8px;background:var(--vscode-textBlockQuote-background)}
details.failed summary{color:var(--vscode-errorForeground)} .label{opacity:.6;font-size:90%}
</style></head><body><h3>${escapeHtml(sessionId)}</h3><div id="t"></div>
<script nonce="${nonce}">
const vscode = acquireVsCodeApi(); const t = document.getElementById('t');
window.addEventListener('message', (e) => {
  if (e.data.type !== 'patches') return;
  const atEnd = window.innerHeight + window.scrollY >= document.body.scrollHeight - 40;
  for (const p of e.data.patches) {
    let el = document.getElementById(p.key);
    if (!el) { el = document.createElement('div'); el.id = p.key; t.appendChild(el); }
    const open = el.querySelector('details') && el.querySelector('details').open;
    el.innerHTML = p.html;
    if (open) el.querySelector('details').open = true;
  }
  if (atEnd) window.scrollTo(0, document.body.scrollHeight);
});
t.addEventListener('dblclick', (e) => {
  const el = e.target.closest('[data-seq]');
  if (el) vscode.postMessage({ type: 'fork', seq: Number(el.dataset.seq) });
});
</script></body></html>`;
}

// ---- Diffs on artifact_changed -------------------------------------------------------

const baselines = new Map<string, string>();
const BASELINE_SCHEME = "agentd-baseline";

async function showChange(file: string, before: string | undefined, sessionId: string): Promise<void> {
  log(`${sessionId}: ${file} changed on disk`);
  if (before === undefined) return;
  const key = `${sessionId}/${Date.now()}`;
  baselines.set(key, before);
  const left = vscode.Uri.from({ scheme: BASELINE_SCHEME, path: file, query: key });
  await vscode.commands.executeCommand(
    "vscode.diff",
    left,
    vscode.Uri.file(file),
    `${vscode.workspace.asRelativePath(file)} (as the session left it ↔ now)`,
  );
}

// ---- Commands ------------------------------------------------------------------------

function need(): AgentdClient {
  if (!client) throw new Error("agentd is not connected");
  return client;
}

async function pickSession(tree: SessionTree, n?: SessionNode): Promise<string | undefined> {
  if (n?.sessionId) return n.sessionId;
  const all: SessionNode[] = [];
  const walk = (xs: SessionNode[]) => xs.forEach((x) => (all.push(x), walk(x.children)));
  walk(tree.roots);
  const p = await vscode.window.showQuickPick(
    all.map((x) => ({ label: nodeView(x).label, description: nodeView(x).description, id: x.sessionId })),
    { placeHolder: "agentd session" },
  );
  return p?.id;
}

const ASK: Record<SendHow, (sid: string) => string> = {
  turn: (sid) => `Prompt for ${sid}`,
  steer: (sid) => `Steer the running turn of ${sid} (goes with its next model call)`,
  queue: (sid) => `Queue a prompt behind the running turn of ${sid}`,
};

/**
 * Asks for input and sends it as a new turn, a steer or a queued prompt. A new turn
 * refused because one runs offers to steer it or queue behind it, with the same text.
 * Attached images go with a new turn only: a steer carries text, and the daemon does
 * not queue a turn with images.
 */
async function sendPrompt(sessionId: string, how: SendHow = "turn"): Promise<void> {
  const attached = how === "turn" ? pending.describe(sessionId) : undefined;
  const input = await vscode.window.showInputBox({
    prompt: attached ? `${ASK[how](sessionId)}, with ${attached}` : ASK[how](sessionId),
    ignoreFocusOut: true,
  });
  if (!input) return;
  const ws = workspaceDir() ?? "";
  await TranscriptPanel.show(need(), sessionId, ws);
  if (attached) {
    const params = pending.turnParams(sessionId, {
      session_id: sessionId,
      input,
      permission_mode: cfg("permissionMode", "ask"),
      wait: false,
    });
    // A refused turn keeps its images attached for the next try.
    await need().request("agentd/turn", params);
    pending.clear(sessionId);
    return;
  }
  const opts = { permissionMode: cfg("permissionMode", "ask") };
  try {
    const sent = await sendInput(need(), sessionId, input, how, opts);
    if (how !== "turn" || sent.outcome !== "started") {
      vscode.window.showInformationMessage(`agentd: ${sent.message}`);
    }
  } catch (e) {
    if (how !== "turn" || (e as { kind?: string }).kind !== "busy") throw e;
    const pick = await vscode.window.showWarningMessage(
      `agentd: a turn is running in ${sessionId}`,
      { detail: "Steer adds your text to the running turn; Queue runs it after the turns ahead." },
      "Steer",
      "Queue",
    );
    if (!pick) return;
    const sent = await sendInput(need(), sessionId, input, pick === "Steer" ? "steer" : "queue", opts);
    vscode.window.showInformationMessage(`agentd: ${sent.message}`);
  }
}

/** Attaches image files to a session's next prompt and says what is attached. */
function attachImages(sessionId: string, files: string[]): void {
  const added = pending.attach(sessionId, files, workspaceDir());
  if (added.length) {
    void vscode.window.showInformationMessage(
      `agentd: attached to the next prompt of ${sessionId}: ${pending.describe(sessionId)}`,
    );
  }
}

/** Image files dropped on a session in the Sessions view attach to its next prompt. */
class SessionDrop implements vscode.TreeDragAndDropController<SessionNode> {
  readonly dropMimeTypes = ["text/uri-list"];
  readonly dragMimeTypes: string[] = [];
  async handleDrop(target: SessionNode | undefined, data: vscode.DataTransfer): Promise<void> {
    const list = await data.get("text/uri-list")?.asString();
    if (!target || !list) return;
    const files = list
      .split(/\r?\n/)
      .filter((l) => l && !l.startsWith("#"))
      .map((l) => vscode.Uri.parse(l.trim()))
      .filter((u) => u.scheme === "file")
      .map((u) => u.fsPath);
    try {
      attachImages(target.sessionId, files);
    } catch (e) {
      await reportError("attach image", e);
    }
  }
}

export async function activate(ctx: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("agentd");
  status = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 10);
  status.command = "agentd.showOutput";
  ctx.subscriptions.push(output, status);

  const explicit = cfg("socketPath", "");
  client = new AgentdClient({
    socketPath: () => (explicit ? Promise.resolve(explicit) : agentctlSocketPath(cfg("agentctlPath", "agentctl"))),
    onPermission: (req) =>
      decide(req, async (q) => {
        const pick = await vscode.window.showWarningMessage(q.title, { modal: true, detail: q.detail }, "Allow", "Deny");
        return pick === "Allow";
      }),
    clientName: "agentd-vscode",
  });
  const c = client;
  const setStatus = (s: ClientState, detail?: string) => {
    const icon = { connected: "$(pass)", connecting: "$(sync~spin)", disconnected: "$(error)", closed: "$(circle-slash)" }[s];
    status.text = `${icon} agentd`;
    status.tooltip = s === "connected" ? `agentd: connected (${c.socketPath})` : `agentd: ${s}${detail ? ` — ${detail}` : ""}`;
    status.show();
    if (s === "disconnected" && detail) log(`disconnected: ${detail}; reconnecting`);
    if (s === "connected") log(`connected to ${c.socketPath}`);
  };
  c.on("state", setStatus);
  // One message per outage, one when it is over.
  let outage = false;
  c.on("state", (s: ClientState, detail?: string) => {
    if (s === "disconnected" && !outage) {
      outage = true;
      void vscode.window.showWarningMessage(`agentd: ${detail ?? "disconnected"}; reconnecting…`);
    } else if (s === "connected" && outage) {
      outage = false;
      void vscode.window.showInformationMessage("agentd: reconnected; open transcripts resume where they stopped");
    }
  });
  c.on("error", (e: Error) => log(`error: ${e.message}`));
  setStatus(c.state);

  const ws = workspaceDir();
  // Without a folder there is no workspace to list: the view stays empty.
  const tree = new SessionTree(c, ws ?? "");
  const reload = () => (ws ? tree.reload() : Promise.resolve());
  const provider = new SessionsProvider(tree);
  ctx.subscriptions.push(
    vscode.window.createTreeView("agentd.sessions", {
      treeDataProvider: provider,
      dragAndDropController: new SessionDrop(),
    }),
  );
  ctx.subscriptions.push(
    vscode.workspace.registerTextDocumentContentProvider(BASELINE_SCHEME, {
      provideTextDocumentContent: (uri) => baselines.get(uri.query) ?? "",
    }),
  );
  c.on("reconnected", () => void reload().catch((e) => log(`refresh failed: ${String(e)}`)));

  const reg = (name: string, fn: (...args: any[]) => Promise<unknown>) =>
    ctx.subscriptions.push(
      vscode.commands.registerCommand(name, async (...args: any[]) => {
        try {
          await fn(...args);
        } catch (e) {
          await reportError(name.replace("agentd.", ""), e);
        }
      }),
    );

  reg("agentd.showOutput", async () => output.show(true));
  reg("agentd.refresh", reload);
  reg("agentd.newSession", async () => {
    if (!ws) throw new Error("open a folder first: sessions belong to a workspace");
    const title = await vscode.window.showInputBox({ prompt: "Title of the new session (optional)" });
    if (title === undefined) return;
    const p: Record<string, unknown> = { workspace: ws };
    if (title) p.title = title;
    const model = cfg("model", "");
    if (model) p.model = model;
    const r = await need().request<{ session_id: string }>("agentd/create", p);
    await tree.reload();
    await TranscriptPanel.show(need(), r.session_id, ws);
    await sendPrompt(r.session_id);
  });
  reg("agentd.openSession", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (sid) await TranscriptPanel.show(need(), sid, ws ?? "");
  });
  reg("agentd.prompt", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (sid) await sendPrompt(sid);
  });
  reg("agentd.steer", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (sid) await sendPrompt(sid, "steer");
  });
  reg("agentd.queue", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (sid) await sendPrompt(sid, "queue");
  });
  reg("agentd.attachImage", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    const picked = await vscode.window.showOpenDialog({
      canSelectMany: true,
      openLabel: "Attach",
      title: `Images for the next prompt of ${sid}`,
      filters: { Images: IMAGE_EXTENSIONS },
      defaultUri: ws ? vscode.Uri.file(ws) : undefined,
    });
    if (!picked?.length) return;
    attachImages(
      sid,
      picked.map((u) => u.fsPath),
    );
  });
  reg("agentd.clearImages", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    pending.clear(sid);
    void vscode.window.showInformationMessage(`agentd: no image attached to ${sid} any more`);
  });
  reg("agentd.interrupt", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    const r = await need().request<{ interrupted: boolean }>("agentd/interrupt", { session_id: sid });
    vscode.window.showInformationMessage(r.interrupted ? `agentd: interrupted ${sid}` : `agentd: ${sid} was not running`);
  });
  reg("agentd.fork", async (n?: SessionNode, seq?: number) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    let toSeq = seq;
    if (toSeq === undefined) {
      const s = await vscode.window.showInputBox({
        prompt: `Fork ${sid} after event seq (empty: the whole session)`,
        validateInput: (v) => (v === "" || /^\d+$/.test(v) ? undefined : "a seq number"),
      });
      if (s === undefined) return;
      toSeq = s === "" ? undefined : Number(s);
    }
    const p: Record<string, unknown> = { session_id: sid };
    if (toSeq !== undefined) p.to_seq = toSeq;
    const r = await need().request<{ child_session_id: string }>("agentd/fork", p);
    await tree.reload();
    await TranscriptPanel.show(need(), r.child_session_id, ws ?? "");
  });
  reg("agentd.compact", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    const r = await need().request<{ recorded: boolean; reason?: string; would_compact_events?: number }>(
      "agentd/compact",
      { session_id: sid },
    );
    vscode.window.showInformationMessage(
      r.recorded ? `agentd: compacted ${r.would_compact_events ?? ""} events` : `agentd: nothing compacted (${r.reason ?? "no reason given"})`,
    );
  });
  reg("agentd.checkpoint", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    const r = await need().request<{ view: string }>("agentd/checkpoint", { session_id: sid });
    const doc = await vscode.workspace.openTextDocument({ content: r.view, language: "markdown" });
    await vscode.window.showTextDocument(doc, { preview: true });
  });
  reg("agentd.openTouchedFile", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    const r = await need().request<{ checkpoint: Record<string, unknown> }>("agentd/checkpoint", { session_id: sid });
    const files = touchedFiles(r.checkpoint);
    if (!files.length) {
      vscode.window.showInformationMessage(`agentd: ${sid} has not touched any file`);
      return;
    }
    const f = await vscode.window.showQuickPick(files, { placeHolder: "file the session touched" });
    if (!f) return;
    const tracker = new ArtifactTracker(ws ?? "");
    await vscode.window.showTextDocument(vscode.Uri.file(tracker.resolve(f)));
  });

  reg("agentd.showDiff", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    const pick = await vscode.window.showQuickPick(
      [
        { label: "Last turn", scope: "turn" as const },
        { label: "Whole session", scope: "session" as const },
      ],
      { placeHolder: `What ${sid} changed in the workspace` },
    );
    if (!pick) return;
    const r = await sessionDiff(need(), sid, pick.scope);
    if (!r.files.length) {
      vscode.window.showInformationMessage(`agentd: ${sid} changed no file there`);
      return;
    }
    const head = r.files.map((f) => `# ${f.status} ${f.path} (+${f.additions} -${f.deletions})`).join("\n");
    const note = r.truncated ? "\n# (truncated: some files list no text)" : "";
    const doc = await vscode.workspace.openTextDocument({ content: `${head}${note}\n\n${r.diff}`, language: "diff" });
    await vscode.window.showTextDocument(doc, { preview: true });
  });
  reg("agentd.undoTurn", async (n?: SessionNode) => {
    const sid = await pickSession(tree, n);
    if (!sid) return;
    const r = await undoTurn(need(), sid);
    if (r.kind === "nothing") {
      vscode.window.showInformationMessage(`agentd: no turn of ${sid} left to undo`);
      return;
    }
    if (r.kind === "conflict") {
      const yes = "Overwrite Their Changes";
      const answer = await vscode.window.showWarningMessage(
        `agentd: these files changed outside the session since its last snapshot: ${r.conflicts.join(", ")}. Undoing the turn overwrites those changes.`,
        { modal: true },
        yes,
      );
      if (answer !== yes) return;
      const forced = await undoTurn(need(), sid, { force: true, toSeq: r.toSeq });
      if (forced.kind === "reverted") {
        vscode.window.showInformationMessage(`agentd: undid the turn, restored ${forced.files.length} file(s)`);
      }
      return;
    }
    vscode.window.showInformationMessage(`agentd: undid the turn, restored ${r.files.length} file(s)`);
  });

  try {
    await c.start();
    await reload();
  } catch (e) {
    await reportError("cannot reach the daemon (retrying in the background)", e);
  }
}

export function deactivate(): void {
  client?.close();
  client = undefined;
}
