-- agentd for Neovim: sessions, transcripts and turns of the agentd daemon.
--
-- Owns the configuration and the one connection (`agentd.rpc`) every buffer shares.
-- The commands in plugin/agentd.lua call the functions here. Views: `agentd://sessions`
-- (list), `agentd://session/SID` (transcript, agentd.transcript) and `agentd://tree`.

local Client = require("agentd.rpc")
local buf = require("agentd.buf")
local transcript = require("agentd.transcript")
local undo = require("agentd.undo")

local uv = vim.uv or vim.loop

local M = {}

local defaults = {
  -- Unix socket of the daemon; nil asks `agentctl socket-path`, which starts the daemon
  -- when none answers (also when reconnecting after the daemon went away).
  socket = nil,
  agentctl = "agentctl",
  -- Passed to agentd/turn when set.
  model = nil,
  provider = nil,
  permission_mode = nil,
  -- Events per agentd/events call while a transcript loads.
  page_size = 500,
  -- Lines of a tool output or reasoning shown in a transcript.
  max_output_lines = 20,
  reconnect_min_ms = 200,
  reconnect_max_ms = 5000,
}

M.config = vim.deepcopy(defaults)

local ctx = { config = M.config }

local function notify(msg, level)
  vim.notify("agentd: " .. msg, level or vim.log.levels.INFO)
end

local function error_text(e)
  local kind = type(e) == "table" and type(e.data) == "table" and e.data.kind or nil
  local msg = type(e) == "table" and e.message or tostring(e)
  return kind and (tostring(kind) .. ": " .. tostring(msg)) or tostring(msg)
end

--- Runs `agentctl socket-path` without blocking; cb(path) or cb(nil, why). Safe in luv callbacks.
local function agentctl_socket_path(agentctl, cb)
  local stdout = uv.new_pipe(false)
  local stderr = uv.new_pipe(false)
  local out, errout = {}, {}
  local code
  -- Done when the process has exited and both pipes reached EOF, in whatever order.
  local remaining = 3
  local function step()
    remaining = remaining - 1
    if remaining > 0 then
      return
    end
    local path = vim.trim(table.concat(out))
    if code == 0 and path ~= "" then
      cb(path)
    else
      cb(nil, ("`%s socket-path` exited %d: %s"):format(agentctl, code, vim.trim(table.concat(errout))))
    end
  end
  local handle, spawn_err
  handle, spawn_err = uv.spawn(agentctl, { args = { "socket-path" }, stdio = { nil, stdout, stderr } }, function(c)
    code = c
    handle:close()
    step()
  end)
  if not handle then
    stdout:close()
    stderr:close()
    cb(nil, ("cannot run %s: %s"):format(agentctl, tostring(spawn_err)))
    return
  end
  local function reader(pipe, acc)
    pipe:read_start(function(_, chunk)
      if chunk then
        acc[#acc + 1] = chunk
      else
        pipe:close()
        step()
      end
    end)
  end
  reader(stdout, out)
  reader(stderr, errout)
end

local function resolve_socket(cb)
  local cfg = M.config
  if cfg.socket then
    cb(cfg.socket)
    return
  end
  agentctl_socket_path(cfg.agentctl, cb)
end

local permission_prompt

local function make_client()
  local c = Client.new({
    resolve_socket = resolve_socket,
    reconnect_min_ms = M.config.reconnect_min_ms,
    reconnect_max_ms = M.config.reconnect_max_ms,
    wants_reconnect = function()
      return transcript.any_open()
    end,
    on_state = function(state, info)
      if state == "disconnected" or state == "closed" then
        if state == "disconnected" then
          notify("lost the connection to the daemon (" .. tostring(info) .. "); reconnecting", vim.log.levels.WARN)
        end
        transcript.each(function(t)
          t:on_disconnected()
        end)
      else
        if state == "reconnected" then
          notify("reconnected to " .. tostring(info))
        end
        transcript.each(function(t)
          t:on_connected()
        end)
      end
    end,
  })
  c:on_notification("agentd/event", transcript.dispatch)
  c:on_request("agentd/permission", function(params, respond)
    permission_prompt(params, respond)
  end)
  return c
end

function M.client()
  if not ctx.client then
    ctx.client = make_client()
  end
  return ctx.client
end

function M.setup(opts)
  opts = opts or {}
  local known = { socket = true, model = true, provider = true, permission_mode = true }
  for k in pairs(defaults) do
    known[k] = true
  end
  for k, v in pairs(opts) do
    if not known[k] then
      error("agentd.setup: unknown option " .. tostring(k))
    end
    M.config[k] = v
  end
  if type(M.config.socket) == "string" then
    M.config.socket = vim.fn.expand(M.config.socket)
  end
  if ctx.client then
    ctx.client.opts.reconnect_min_ms = M.config.reconnect_min_ms
    ctx.client.opts.reconnect_max_ms = M.config.reconnect_max_ms
  end
end

-- Every call goes through here so errors read the same way.
local function call(method, params, cb)
  M.client():request(method, params, function(e, r)
    if e then
      notify(method .. " failed: " .. error_text(e), vim.log.levels.ERROR)
      return
    end
    if cb then
      cb(r)
    end
  end)
end

local function cwd()
  return uv.fs_realpath(vim.fn.getcwd()) or vim.fn.getcwd()
end

--- The transcript of the current buffer, or nil.
function M.current()
  return transcript.for_buf(vim.api.nvim_get_current_buf())
end

-- Permission requests (ask mode): the user picks; dismissing the prompt denies.
permission_prompt = function(params, respond)
  params = type(params) == "table" and params or {}
  local ok, args = pcall(vim.json.encode, params.args)
  args = ok and args or "?"
  if #args > 300 then
    args = args:sub(1, 300) .. "…"
  end
  local prompt = ("agentd: session %s wants to run %s %s"):format(
    tostring(params.session_id),
    tostring(params.tool),
    args
  )
  vim.ui.select({ "Allow", "Deny" }, { prompt = prompt, kind = "agentd.permission" }, function(choice)
    respond({ decision = choice == "Allow" and "allow" or "deny" })
  end)
end

--- :AgentdOpen SID
function M.open(sid)
  if not sid or sid == "" then
    notify("usage: :AgentdOpen SESSION_ID", vim.log.levels.ERROR)
    return
  end
  M.client()
  local t = transcript.open(ctx, sid)
  buf.show(t.buf)
  return t
end

local function list_lines(root, sessions)
  local lines = { "agentd sessions in " .. root .. "   (<CR> open, R refresh)", "" }
  for _, s in ipairs(sessions) do
    local title = (s.title ~= nil and s.title ~= vim.NIL) and s.title or ""
    if s.relation == "subagent" then
      title = ("[subagent of %s] %s"):format(tostring(s.parent_session_id), title)
    end
    lines[#lines + 1] = ("%s  %-7s  %5d events  %s"):format(s.session_id, s.status, s.event_count, title)
  end
  if #sessions == 0 then
    lines[#lines + 1] = "(no sessions; :AgentdPrompt {text} starts one here)"
  end
  return lines
end

local function sid_on_line(line)
  -- A session id (docs/log-format.md#session-ids) is the first word after any tree drawing.
  return line:match("^[^%w_]*([%w_][%w_%.%-]*)")
end

--- :AgentdList
function M.list()
  local b = buf.scratch("agentd://sessions", "agentd-sessions")
  buf.show(b)
  local root = cwd()
  local sessions = {}
  local function page(cursor)
    local params = { workspace = root, limit = 200 }
    if cursor then
      params.cursor = cursor
    end
    call("agentd/list", params, function(r)
      for _, s in ipairs(r.sessions or {}) do
        sessions[#sessions + 1] = s
      end
      if r.next_cursor ~= nil and r.next_cursor ~= vim.NIL then
        page(r.next_cursor)
      else
        buf.set_lines(b, 0, -1, list_lines(root, sessions))
        vim.b[b].agentd_listed = #sessions
      end
    end)
  end
  page(nil)
  local function open_line()
    local line = vim.api.nvim_get_current_line()
    if vim.api.nvim_win_get_cursor(0)[1] <= 2 then
      return
    end
    local sid = sid_on_line(line)
    if sid then
      M.open(sid)
    end
  end
  vim.keymap.set("n", "<CR>", open_line, { buffer = b, desc = "agentd: open the session" })
  vim.keymap.set("n", "R", M.list, { buffer = b, desc = "agentd: refresh" })
  return b
end

--- :AgentdTree — the fork tree of the current session, else of the cwd's sessions.
function M.tree()
  local t = M.current()
  local params, name
  if t then
    params, name = { session_id = t.sid }, "agentd://tree/" .. t.sid
  else
    params, name = { workspace = cwd() }, "agentd://tree"
  end
  local b = buf.scratch(name, "agentd-tree")
  buf.show(b)
  call("agentd/tree", params, function(r)
    local lines = buf.split_lines(r.drawing or "")
    if #lines == 1 and lines[1] == "" then
      lines = { "(no sessions)" }
    end
    buf.set_lines(b, 0, -1, lines)
  end)
  vim.keymap.set("n", "<CR>", function()
    local sid = sid_on_line(vim.api.nvim_get_current_line())
    if sid then
      M.open(sid)
    end
  end, { buffer = b, desc = "agentd: open the session" })
  return b
end

-- The daemon frees a session just after its `turn_ended` is durable, so a prompt sent
-- the moment the transcript shows the end may still get `busy` for an instant; it is
-- retried briefly. A turn the transcript shows as running is reported at once.
local BUSY_RETRIES = 20
local BUSY_RETRY_MS = 50

local function start_turn(t, text)
  t:when_live(function()
    local cfg = M.config
    local params = {
      session_id = t.sid,
      input = text,
      wait = false,
      model = cfg.model,
      provider = cfg.provider,
      permission_mode = cfg.permission_mode,
    }
    local function try(attempt)
      M.client():request("agentd/turn", params, function(e)
        if not e then
          return
        end
        local kind = type(e.data) == "table" and e.data.kind or nil
        if kind == "busy" and t.status == "idle" and attempt < BUSY_RETRIES then
          vim.defer_fn(function()
            try(attempt + 1)
          end, BUSY_RETRY_MS)
          return
        end
        if kind == "busy" then
          notify("a turn is already running in " .. t.sid .. "; :AgentdInterrupt stops it", vim.log.levels.ERROR)
        else
          notify("agentd/turn failed: " .. error_text(e), vim.log.levels.ERROR)
        end
      end)
    end
    try(0)
  end)
end

--- :AgentdPrompt {text} — a turn in the current transcript's session, else in a new
--- session in the cwd.
function M.prompt(text)
  if not text or vim.trim(text) == "" then
    notify("usage: :AgentdPrompt {text}", vim.log.levels.ERROR)
    return
  end
  local t = M.current()
  if t then
    start_turn(t, text)
    return
  end
  call("agentd/create", { workspace = cwd() }, function(r)
    local nt = M.open(r.session_id)
    start_turn(nt, text)
  end)
end

local function need_current(what)
  local t = M.current()
  if not t then
    notify(what .. " works in a session buffer (agentd://session/SID)", vim.log.levels.ERROR)
  end
  return t
end

--- :AgentdSteer {text} — input for the running turn of the current transcript's
--- session: recorded and sent with the turn's next provider call. Refused
--- (`not_running`) when no turn runs.
function M.steer(text)
  if not text or vim.trim(text) == "" then
    notify("usage: :AgentdSteer {text}", vim.log.levels.ERROR)
    return
  end
  local t = need_current(":AgentdSteer")
  if not t then
    return
  end
  call("agentd/steer", { session_id = t.sid, input = text }, function(r)
    notify("steered into " .. tostring(r.turn_id or "the running turn"))
  end)
end

--- :AgentdQueue {text} — a prompt queued behind the running turn of the current
--- transcript's session (started at once when none runs); it survives restarts.
function M.queue(text)
  if not text or vim.trim(text) == "" then
    notify("usage: :AgentdQueue {text}", vim.log.levels.ERROR)
    return
  end
  local t = need_current(":AgentdQueue")
  if not t then
    return
  end
  local cfg = M.config
  call("agentd/turn", {
    session_id = t.sid,
    input = text,
    wait = false,
    queue = true,
    model = cfg.model,
    provider = cfg.provider,
    permission_mode = cfg.permission_mode,
  }, function(r)
    if r.status == "queued" then
      notify("queued as " .. tostring(r.turn_id) .. "; it runs when the current turn ends")
    end
  end)
end

--- :AgentdInterrupt
function M.interrupt()
  local t = need_current(":AgentdInterrupt")
  if not t then
    return
  end
  call("agentd/interrupt", { session_id = t.sid }, function(r)
    notify(r.interrupted and "turn interrupted" or "no turn was running")
  end)
end

--- :AgentdFork — a child session from the start through the event under the cursor.
function M.fork()
  local t = need_current(":AgentdFork")
  if not t then
    return
  end
  local seq = t:seq_at(vim.api.nvim_win_get_cursor(0)[1])
  if not seq then
    notify("put the cursor on an event to fork at", vim.log.levels.ERROR)
    return
  end
  call("agentd/fork", { session_id = t.sid, to_seq = seq }, function(r)
    notify(("forked %s at seq %d into %s"):format(t.sid, seq, r.child_session_id))
    M.open(r.child_session_id)
  end)
end

--- :AgentdCompact [tail_events]
function M.compact(tail)
  local t = need_current(":AgentdCompact")
  if not t then
    return
  end
  local params = { session_id = t.sid }
  if tail and tail ~= "" then
    local n = tonumber(tail)
    if not n or n < 0 or n ~= math.floor(n) then
      notify("usage: :AgentdCompact [tail_events]", vim.log.levels.ERROR)
      return
    end
    params.tail_events = n
  end
  call("agentd/compact", params, function(r)
    if r.recorded then
      local range = type(r.range) == "table" and r.range or {}
      notify(("compacted %s: seq %s..%s (%s events)"):format(
        t.sid,
        tostring(range.from_seq),
        tostring(range.to_seq),
        tostring(r.would_compact_events)
      ))
    else
      notify("nothing compacted: " .. tostring(r.reason or "not compactable"))
    end
  end)
end

-- The session a diff/undo command is about: SID among `words`, else the transcript's.
local function target_sid(words, what)
  for _, w in ipairs(words) do
    if w ~= "turn" and w ~= "session" then
      return w
    end
  end
  local t = need_current(what .. " (or give a SESSION_ID)")
  return t and t.sid
end

--- :AgentdDiff [turn|session] [SID] — what the last turn (default) or the whole session
--- changed, as a unified diff in `agentd://diff/SID`.
function M.diff(args)
  local words = vim.split(vim.trim(args or ""), "%s+", { trimempty = true })
  local scope = vim.tbl_contains(words, "session") and "session" or "turn"
  local sid = target_sid(words, ":AgentdDiff")
  if not sid then
    return
  end
  undo.diff(M.client(), sid, scope, function(e, r)
    if e then
      notify("diff failed: " .. error_text(e), vim.log.levels.ERROR)
      return
    end
    local out = {}
    for _, f in ipairs(r.files or {}) do
      out[#out + 1] = ("# %s %s (+%s -%s)"):format(f.status, f.path, tostring(f.additions), tostring(f.deletions))
    end
    if #out == 0 then
      notify(("%s changed no file there"):format(sid))
      return
    end
    if r.truncated == true then
      out[#out + 1] = "# (truncated: some files list no text)"
    end
    out[#out + 1] = ""
    vim.list_extend(out, buf.split_lines(r.diff))
    local b = buf.scratch(("agentd://diff/%s/%s"):format(sid, scope), "diff")
    buf.set_lines(b, 0, -1, out)
    buf.show(b)
  end)
end

--- :AgentdUndoTurn [SID] — puts back the files as they were before the last turn that
--- changed them. Files changed outside the session since are listed and overwritten only
--- when the user picks "Overwrite" in the vim.ui.select that follows.
function M.undo_turn(args)
  local words = vim.split(vim.trim(args or ""), "%s+", { trimempty = true })
  local sid = target_sid(words, ":AgentdUndoTurn")
  if not sid then
    return
  end
  local c = M.client()
  local function done(e, r)
    if e then
      notify("undo failed: " .. error_text(e), vim.log.levels.ERROR)
    elseif r.kind == "nothing" then
      notify(("no turn of %s left to undo"):format(sid))
    elseif r.kind == "reverted" then
      notify(("undid the turn: restored %d file(s)"):format(#r.files))
    end
  end
  undo.undo(c, sid, {}, function(e, r)
    if e or r.kind ~= "conflict" then
      return done(e, r)
    end
    local prompt = ("agentd: changed outside the session since its last snapshot: %s. Overwrite them?"):format(
      table.concat(r.conflicts, ", ")
    )
    vim.ui.select({ "Cancel", "Overwrite" }, { prompt = prompt, kind = "agentd.undo_conflict" }, function(choice)
      if choice ~= "Overwrite" then
        notify("undo cancelled: nothing changed")
        return
      end
      undo.undo(c, sid, { force = true, to_seq = r.to_seq }, done)
    end)
  end)
end

--- Session ids for command-line completion (waits at most a second).
function M.complete_sessions(lead)
  local e, r = M.client():request_sync("agentd/list", { limit = 200 }, 1000)
  if e or type(r) ~= "table" then
    return {}
  end
  local out = {}
  for _, s in ipairs(r.sessions or {}) do
    if vim.startswith(s.session_id, lead or "") then
      out[#out + 1] = s.session_id
    end
  end
  return out
end

M._ctx = ctx
M._sid_on_line = sid_on_line

return M
