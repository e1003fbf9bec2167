-- Headless tests of the agentd plugin against a real daemon (started by tests/run.sh).
-- Every wait polls editor state with vim.wait and a deadline; nothing sleeps blindly.
-- Exits 0 when every test passed, else 1 (cquit) after printing each failure.

local uv = vim.uv or vim.loop

vim.cmd("runtime plugin/agentd.lua")
local agentd = require("agentd")
local transcript = require("agentd.transcript")

local examples = assert(os.getenv("AGENTD_NVIM_EXAMPLES"), "AGENTD_NVIM_EXAMPLES unset")
local ws = uv.fs_realpath(vim.fn.getcwd())

local function log(s)
  io.stderr:write(s .. "\n")
end

-- Notifications are recorded so tests can assert the messages users see.
local notes = {}
vim.notify = function(msg, level)
  notes[#notes + 1] = { msg = msg, level = level }
  log("    notify: " .. msg)
end

local function lines(b)
  return vim.api.nvim_buf_get_lines(b, 0, -1, false)
end

local function dump(b)
  return table.concat(lines(b), "\n")
end

local function has_line(b, pat, plain)
  for i, l in ipairs(lines(b)) do
    if plain then
      if l == pat then
        return i
      end
    elseif l:find(pat) then
      return i
    end
  end
  return nil
end

local function wait_for(desc, pred, timeout, b)
  local ok = vim.wait(timeout or 15000, pred, 20)
  if not ok then
    error(("timed out waiting for %s%s"):format(desc, b and ("\n--- buffer:\n" .. dump(b)) or ""), 2)
  end
end

local function wait_line(b, pat, plain, timeout)
  local found
  wait_for("a line " .. (plain and "equal to " or "matching ") .. vim.inspect(pat), function()
    found = has_line(b, pat, plain)
    return found ~= nil
  end, timeout, b)
  return found
end

local function sh(args)
  local out = vim.fn.system(args)
  if vim.v.shell_error ~= 0 then
    error(("command failed (%d): %s\n%s"):format(vim.v.shell_error, table.concat(args, " "), out), 2)
  end
  return vim.trim(out)
end

local function new_session(title, workspace)
  return sh({ "agentctl", "new", "--title", title, "--workspace", workspace or ws })
end

local function append(sid, typ, data)
  return sh({ "agentctl", "append", sid, "--type", typ, "--data", vim.json.encode(data) })
end

local function cmd(s)
  vim.cmd(s)
end

local function cur_buf_name()
  return vim.api.nvim_buf_get_name(0)
end

-- The seqs of a transcript's event header lines, in buffer order.
local function seqs(b)
  local out = {}
  for _, l in ipairs(lines(b)) do
    local s = l:match("^%[(%d+)%] ")
    if s then
      out[#out + 1] = tonumber(s)
    end
  end
  return out
end

local function assert_contiguous(b, last)
  local s = seqs(b)
  if #s ~= last + 1 then
    error(("expected seqs 0..%d once each, got %d headers: %s\n%s"):format(last, #s, vim.inspect(s), dump(b)), 2)
  end
  for i, v in ipairs(s) do
    if v ~= i - 1 then
      error(("seq %d at position %d (gap or duplicate): %s"):format(v, i, vim.inspect(s)), 2)
    end
  end
end

local function select_answer(choice)
  local asked = {}
  vim.ui.select = function(items, opts, on_choice)
    asked[#asked + 1] = { items = items, prompt = opts.prompt }
    vim.schedule(function()
      on_choice(choice)
    end)
  end
  return asked
end

local function noted(pat)
  for _, n in ipairs(notes) do
    if n.msg:find(pat) then
      return true
    end
  end
  return false
end

-- A fresh, non-agentd buffer in the only window, so commands start from a plain buffer.
local function plain_buffer()
  vim.cmd("enew")
end

local tests = {}
local function test(name, fn)
  tests[#tests + 1] = { name = name, fn = fn }
end

test("checkhealth reports the daemon", function()
  local tabs = vim.fn.tabpagenr("$")
  cmd("checkhealth agentd")
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "protocol version 1", false)
  assert(has_line(b, "agentctl: "), dump(b))
  assert(has_line(b, "daemon agentd"), dump(b))
  assert(not has_line(b, "ERROR"), dump(b))
  -- Older versions report in a new tab, newer ones in the current window.
  if vim.fn.tabpagenr("$") > tabs then
    cmd("tabclose")
  end
end)

test("list shows the workspace's sessions and <CR> opens one", function()
  plain_buffer()
  local a = new_session("alpha")
  local bsid = new_session("beta")
  local other = new_session("elsewhere", vim.fn.fnamemodify(ws, ":h") .. "/other")
  cmd("AgentdList")
  local b = vim.api.nvim_get_current_buf()
  assert(cur_buf_name() == "agentd://sessions", cur_buf_name())
  local la = wait_line(b, "^" .. vim.pesc(a) .. " .* alpha$")
  assert(has_line(b, "^" .. vim.pesc(bsid) .. "%s+idle%s+1 events%s+beta$"), dump(b))
  assert(not has_line(b, vim.pesc(other)), "a session of another workspace is listed:\n" .. dump(b))
  vim.api.nvim_win_set_cursor(0, { la, 0 })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<CR>", true, false, true), "x", false)
  assert(cur_buf_name() == "agentd://session/" .. a, cur_buf_name())
  local tb = vim.api.nvim_get_current_buf()
  wait_line(tb, "^%[0%] session started  " .. vim.pesc(ws) .. "$")
  assert(has_line(tb, "^agentd session " .. vim.pesc(a) .. '  "alpha"$'), dump(tb))
end)

test("open fills from the Log and follows live appends", function()
  plain_buffer()
  local sid = new_session("follow")
  append(sid, "user_message", { text = "hello from outside" })
  cmd("AgentdOpen " .. sid)
  local b = vim.api.nvim_get_current_buf()
  assert(cur_buf_name() == "agentd://session/" .. sid)
  wait_line(b, "    hello from outside", true)
  wait_line(b, "^state: live")
  assert(not vim.bo[b].modifiable, "transcript must be read-only")
  append(sid, "assistant_message", { text = "line one\nline two" })
  wait_line(b, "    line two", true)
  assert(has_line(b, "[2] assistant", true), dump(b))
  append(sid, "user_message", { text = "third" })
  wait_line(b, "    third", true)
  assert_contiguous(b, 3)
end)

test("prompt in a plain buffer starts a session here and streams the answer", function()
  plain_buffer()
  agentd.setup({ model = "script:" .. examples .. "/hello.json", permission_mode = "auto" })
  cmd("AgentdPrompt What is here?")
  wait_for("a session buffer", function()
    return cur_buf_name():find("^agentd://session/") ~= nil
  end)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "turn ended  completed$", false, 30000)
  assert(has_line(b, "    What is here?", true), dump(b))
  assert(has_line(b, '^%[6%] tool call list_dir {"path":"%."}$'), dump(b))
  assert(has_line(b, "    Those are the files at the top of your workspace.", false), dump(b))
  assert(not has_line(b, "streaming"), "the streaming area must be gone after the turn:\n" .. dump(b))
  local sid = cur_buf_name():match("^agentd://session/(.*)$")
  local show = vim.json.decode(sh({ "agentctl", "show", sid, "--json" }))
  local ws_of = show.workspace or (show.result and show.result.workspace)
  assert(ws_of == ws, "new session's workspace: " .. vim.inspect(show))
  assert_contiguous(b, #seqs(b) - 1)
end)

test("a slow answer streams into the transcript and :AgentdInterrupt stops it", function()
  agentd.setup({ model = "script:" .. examples .. "/slow.json" })
  plain_buffer()
  cmd("AgentdPrompt tell me a story")
  wait_for("a session buffer", function()
    return cur_buf_name():find("^agentd://session/") ~= nil
  end)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "… assistant (streaming)", true)
  wait_line(b, "^    Once upon")
  -- A resubscription (as after a lagged notice) gets the step's text again as one
  -- catch-up delta: the streaming area shows it once, not after what it already had.
  local sid = cur_buf_name():match("^agentd://session/(.*)$")
  local t = transcript.by_sid[sid]
  local before = t.stream.text
  t:on_event({ type = "lagged" })
  wait_line(b, "^state: live")
  wait_for("streamed text after the resubscription", function()
    return t.stream ~= nil and #t.stream.text > #before
  end)
  local shown = table.concat(lines(b), "\n")
  local _, times = shown:gsub("Once upon", "")
  assert(times == 1, "the streamed text shows " .. times .. " times:\n" .. dump(b))
  cmd("AgentdPrompt a second prompt while the first runs")
  wait_for("the busy message", function()
    return noted("a turn is already running in ")
  end)
  cmd("AgentdInterrupt")
  wait_line(b, "turn ended  interrupted", false)
  assert(not has_line(b, "streaming"), dump(b))
  assert(has_line(b, "^%[%d+%] assistant %(partial%)$"), dump(b))
end)

test(":AgentdQueue waits behind the running turn and :AgentdSteer is refused when idle", function()
  agentd.setup({ model = "script:" .. examples .. "/slow.json" })
  plain_buffer()
  cmd("AgentdPrompt tell me a story")
  wait_for("a session buffer", function()
    return cur_buf_name():find("^agentd://session/") ~= nil
  end)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "^    Once upon")
  cmd("AgentdQueue and then a second one")
  wait_for("the queued notice", function()
    return noted("queued as turn_")
  end)
  cmd("AgentdInterrupt")
  -- The queued prompt starts once the first turn ended.
  wait_line(b, "^    and then a second one$")
  wait_for("the second turn streaming", function()
    local n = 0
    for _, l in ipairs(lines(b)) do
      if l:find("^    Once upon") then
        n = n + 1
      end
    end
    return n >= 2
  end, nil, b)
  cmd("AgentdInterrupt")
  wait_for("both turns ended", function()
    local n = 0
    for _, l in ipairs(lines(b)) do
      if l:find("turn ended  interrupted", 1, true) then
        n = n + 1
      end
    end
    return n == 2
  end, nil, b)
  -- Refused by kind, the protocol's contract; the wording is the daemon's.
  cmd("AgentdSteer too late")
  wait_for("the not_running refusal", function()
    return noted("^agentd: agentd/steer failed: not_running: ")
  end)
  assert(not has_line(b, "    too late", true), "a refused steer is in the transcript:\n" .. dump(b))
end)

local forked_parent
test("fork at the event under the cursor opens the child", function()
  agentd.setup({ model = "script:" .. examples .. "/hello.json" })
  plain_buffer()
  local sid = new_session("to fork")
  append(sid, "user_message", { text = "first question" })
  append(sid, "assistant_message", { text = "first answer" })
  append(sid, "user_message", { text = "second question" })
  cmd("AgentdOpen " .. sid)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "    second question", true)
  local l = wait_line(b, "    first answer", true) -- inside event 2's block
  vim.api.nvim_win_set_cursor(0, { l, 0 })
  cmd("AgentdFork")
  wait_for("the child's buffer", function()
    return cur_buf_name() ~= "agentd://session/" .. sid and cur_buf_name():find("^agentd://session/") ~= nil
  end)
  local child = cur_buf_name():match("^agentd://session/(.*)$")
  local cb = vim.api.nvim_get_current_buf()
  wait_line(cb, "forked from " .. vim.pesc(sid) .. " @2", false)
  wait_line(cb, "    first answer", true)
  assert(not has_line(cb, "second question"), "the child must stop at seq 2:\n" .. dump(cb))
  assert(noted("forked " .. vim.pesc(sid) .. " at seq 2 into " .. vim.pesc(child)))
  forked_parent = { parent = sid, child = child, buf = b }
end)

test("tree shows the fork and <CR> opens a node", function()
  assert(forked_parent, "needs the fork test")
  vim.api.nvim_win_set_buf(0, forked_parent.buf)
  cmd("AgentdTree")
  assert(cur_buf_name() == "agentd://tree/" .. forked_parent.parent, cur_buf_name())
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "^" .. vim.pesc(forked_parent.parent) .. ' "to fork"')
  local l = wait_line(b, vim.pesc(forked_parent.child) .. " @2")
  vim.api.nvim_win_set_cursor(0, { l, 0 })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<CR>", true, false, true), "x", false)
  assert(cur_buf_name() == "agentd://session/" .. forked_parent.child, cur_buf_name())
end)

test("tree outside a transcript draws the directory's sessions", function()
  assert(forked_parent, "needs the fork test")
  plain_buffer()
  cmd("AgentdTree")
  assert(cur_buf_name() == "agentd://tree", cur_buf_name())
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "^" .. vim.pesc(forked_parent.parent) .. ' "to fork"')
  assert(has_line(b, vim.pesc(forked_parent.child) .. " @2"), dump(b))
end)

test(":AgentdOpen completes session ids", function()
  assert(forked_parent, "needs the fork test")
  local got = vim.fn.getcompletion("AgentdOpen " .. forked_parent.parent:sub(1, -3), "cmdline")
  assert(vim.tbl_contains(got, forked_parent.parent), vim.inspect(got))
end)

test("compact records a compaction that shows up live", function()
  plain_buffer()
  local sid = new_session("to compact")
  for i = 1, 6 do
    append(sid, "user_message", { text = "question " .. i })
    append(sid, "assistant_message", { text = "answer " .. i })
  end
  cmd("AgentdOpen " .. sid)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "    answer 6", true)
  wait_line(b, "^state: live")
  cmd("AgentdCompact 2")
  wait_line(b, "^%[13%] compaction deterministic_v1  seq 0%.%.10$")
  assert(has_line(b, "^    Compacted 11 events"), dump(b))
  -- The event may arrive before the call's answer: wait for the message too.
  wait_for("the compaction message", function()
    return noted("^agentd: compacted " .. vim.pesc(sid) .. ": seq 0%.%.10 %(11 events%)$")
  end)

  -- Nothing left to compact: the daemon's reason is shown, and nothing is recorded.
  cmd("AgentdCompact 2")
  wait_for("the reason", function()
    return noted("^agentd: nothing compacted: ")
  end)
  assert(not has_line(b, "^%[14%]"), dump(b))
end)

test("ask mode: permission requests go through vim.ui.select", function()
  agentd.setup({ model = "script:" .. examples .. "/write.json", permission_mode = "ask" })
  local asked = select_answer("Allow")
  plain_buffer()
  cmd("AgentdPrompt write the notes")
  wait_for("a session buffer", function()
    return cur_buf_name():find("^agentd://session/") ~= nil
  end)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "turn ended  completed$", false, 30000)
  assert(#asked == 1, vim.inspect(asked))
  assert(asked[1].prompt:find("wants to run write_file", 1, true), asked[1].prompt)
  assert(vim.deep_equal(asked[1].items, { "Allow", "Deny" }))
  assert(has_line(b, "^%[%d+%] permission allow %(call_1_0_0%)$"), dump(b))
  assert(vim.fn.readfile(ws .. "/notes.txt")[1] == "written by the script provider")
  os.remove(ws .. "/notes.txt")

  asked = select_answer(nil) -- dismissed: deny
  cmd("AgentdPrompt write the notes again")
  wait_line(b, "permission deny", false, 30000)
  wait_for("the second turn's end", function()
    local n = 0
    for _, l in ipairs(lines(b)) do
      if l:find("turn ended  completed$") then
        n = n + 1
      end
    end
    return n == 2
  end, 30000, b)
  assert(#asked == 1, vim.inspect(asked))
  assert(vim.fn.filereadable(ws .. "/notes.txt") == 0, "a denied write happened")
  agentd.setup({ permission_mode = "auto" })
end)

test("a subagent is marked in its parent's transcript, the list, the tree and its own transcript", function()
  -- The model delegates with the `task` tool; the child answers its brief.
  local script = vim.fn.tempname() .. ".json"
  vim.fn.writefile({
    vim.json.encode({
      rules = {
        { match = "Count the notes", steps = { { text = "three notes" } } },
        {
          steps = {
            { tool_calls = { { name = "task", args = { prompt = "Count the notes", title = "note counter" } } } },
            { text = "the helper counted" },
          },
        },
      },
    }),
  }, script)
  plain_buffer()
  agentd.setup({ model = "script:" .. script, permission_mode = "auto" })
  cmd("AgentdPrompt delegate the count")
  wait_for("a session buffer", function()
    return cur_buf_name():find("^agentd://session/") ~= nil
  end)
  local pb = vim.api.nvim_get_current_buf()
  local parent = cur_buf_name():match("^agentd://session/(.+)$")
  wait_line(pb, "turn ended  completed$", false, 30000)
  local l = wait_line(pb, "^%[%d+%] tool result ok %(call_1_0_0%)  subagent ")
  local child = lines(pb)[l]:match("subagent (%S+)$")
  assert(child and child ~= parent, dump(pb))
  assert(has_line(pb, "    three notes", true), dump(pb))

  cmd("AgentdList")
  local b = vim.api.nvim_get_current_buf()
  local cl = wait_line(b, "^" .. vim.pesc(child) .. " .*%[subagent of " .. vim.pesc(parent) .. "%] note counter$")
  assert(not has_line(b, "^" .. vim.pesc(parent) .. " .*subagent"), dump(b))

  vim.api.nvim_win_set_buf(0, pb)
  cmd("AgentdTree")
  local tb = vim.api.nvim_get_current_buf()
  wait_line(tb, vim.pesc(child) .. ".*%[subagent%]")

  cmd("AgentdList")
  b = vim.api.nvim_get_current_buf()
  cl = wait_line(b, "^" .. vim.pesc(child) .. " ")
  vim.api.nvim_win_set_cursor(0, { cl, 0 })
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes("<CR>", true, false, true), "x", false)
  assert(cur_buf_name() == "agentd://session/" .. child, cur_buf_name())
  local cb = vim.api.nvim_get_current_buf()
  wait_line(cb, "^%[0%] subagent of " .. vim.pesc(parent) .. " %(task call_1_0_0%)  " .. vim.pesc(ws) .. "$")
  wait_line(cb, "    Count the notes", true)
end)

test("daemon restart: clear message, reconnect, no gap and no duplicate", function()
  -- The first retry comes late enough that the appends below land while the plugin is
  -- away, so the events reach it as the subscription's backlog.
  agentd.setup({ reconnect_min_ms = 1000, reconnect_max_ms = 1000 })
  plain_buffer()
  local sid = new_session("restart")
  append(sid, "user_message", { text = "before" })
  cmd("AgentdOpen " .. sid)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "    before", true)
  wait_line(b, "^state: live")
  sh({ "agentctl", "daemon", "stop" })
  wait_for("the disconnect message", function()
    return noted("lost the connection to the daemon")
  end)
  wait_line(b, "^state: disconnected, reconnecting")
  -- agentctl starts a new daemon.
  append(sid, "user_message", { text = "while away 1" })
  append(sid, "user_message", { text = "while away 2" })
  assert(
    not agentd.client():is_connected(),
    "the plugin reconnected before the appends finished; the backlog path was not exercised"
  )
  assert(not has_line(b, "while away"), dump(b))
  wait_for("the reconnect message", function()
    return noted("reconnected to ")
  end)
  wait_line(b, "    while away 2", true)
  wait_line(b, "^state: live")
  append(sid, "user_message", { text = "after" })
  wait_line(b, "    after", true)
  assert_contiguous(b, 4)

  -- A second restart with a quick retry: the reconnect may now come before, between or
  -- after the appends, and every order must end with each event shown once.
  agentd.setup({ reconnect_min_ms = 100, reconnect_max_ms = 400 })
  sh({ "agentctl", "daemon", "stop" })
  wait_line(b, "^state: disconnected")
  append(sid, "assistant_message", { text = "during the second outage" })
  wait_line(b, "    during the second outage", true)
  wait_line(b, "^state: live")
  append(sid, "user_message", { text = "last" })
  wait_line(b, "    last", true)
  assert_contiguous(b, 6)
end)

test("a configured socket: open while the daemon is down, fill once it starts", function()
  local sid = new_session("down at open")
  append(sid, "user_message", { text = "recorded before" })
  agentd.setup({ socket = assert(os.getenv("AGENTD_SOCKET")), reconnect_min_ms = 100, reconnect_max_ms = 300 })
  agentd.client():close()
  sh({ "agentctl", "daemon", "stop" })
  plain_buffer()
  cmd("AgentdOpen " .. sid)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "^state: disconnected, reconnecting")
  -- With a configured socket the plugin never starts a daemon itself: the buffer stays
  -- empty until one is started here.
  assert(not has_line(b, "recorded before"), dump(b))
  sh({ "agentctl", "daemon", "start" })
  wait_line(b, "    recorded before", true)
  wait_line(b, "^state: live")
  append(sid, "user_message", { text = "live again" })
  wait_line(b, "    live again", true)
  assert_contiguous(b, 2)
  agentd.config.socket = nil
end)

test("opening a session that does not exist says so", function()
  plain_buffer()
  cmd("AgentdOpen 20200101T000000-000000")
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "^state: error: not_found")
  assert(noted("loading events for 20200101T000000%-000000 failed %(not_found%)"), vim.inspect(notes))
  vim.cmd("bwipeout " .. b)
  assert(transcript.by_sid["20200101T000000-000000"] == nil, "a wiped transcript stays registered")
end)

test("a subscriber that falls behind (lagged) catches up without gap or duplicate", function()
  plain_buffer()
  local sid = new_session("lagging")
  cmd("AgentdOpen " .. sid)
  local b = vim.api.nvim_get_current_buf()
  wait_line(b, "^state: live")
  local t = transcript.by_sid[sid]
  local N = 10000
  local done = vim.fn.tempname()
  local here = debug.getinfo(1, "S").source:sub(2):match("(.*)/")
  local plugin = vim.fn.fnamemodify(here, ":h")
  local handle = uv.spawn(vim.v.progpath, {
    args = { "--headless", "-u", "NONE", "-i", "NONE", "-n", "--cmd", "set rtp^=" .. plugin, "-c", "luafile " .. here .. "/append_bulk.lua" },
    env = {
      "AGENTD_SOCKET=" .. os.getenv("AGENTD_SOCKET"),
      "AGENTD_BULK_SID=" .. sid,
      "AGENTD_BULK_N=" .. N,
      "AGENTD_BULK_DONE=" .. done,
      "HOME=" .. os.getenv("HOME"),
      "PATH=" .. os.getenv("PATH"),
    },
  }, function() end)
  assert(handle, "cannot start the appender")
  -- Freeze this editor (nothing reads the socket) until the appender got its answer: the
  -- daemon then has all N events to deliver to a subscriber that is not reading.
  local deadline = uv.hrtime() + 60e9
  while not uv.fs_stat(done) do
    assert(uv.hrtime() < deadline, "the appender never finished")
    uv.sleep(10)
  end
  wait_for("the last bulk event", function()
    return t.last_seq == N
  end, 60000)
  wait_line(b, "    bulk " .. N, true)
  assert_contiguous(b, N)
  log(("    lagged notices: %d"):format(t.lagged or 0))
  assert((t.lagged or 0) >= 1, "the daemon never reported the subscriber as lagged")
  wait_line(b, "^state: live")
  os.remove(done)
end)

test("a huge session loads in pages without freezing the editor", function()
  plain_buffer()
  local sid = new_session("huge")
  local N = 20000
  local client = agentd.client()
  local batch = {}
  for i = 1, N do
    batch[#batch + 1] = { type = "user_message", data = { text = ("message %d %s"):format(i, ("x"):rep(80)) } }
    if #batch == 1000 then
      local e = client:request_sync("agentd/append", { session_id = sid, events = batch }, 30000)
      assert(not e, vim.inspect(e))
      batch = {}
    end
  end
  -- A timer measures how long the loop goes without running it (a frozen editor).
  local max_gap, last_tick, partial = 0, uv.hrtime(), false
  local timer = uv.new_timer()
  local b
  timer:start(10, 10, function()
    local now = uv.hrtime()
    max_gap = math.max(max_gap, (now - last_tick) / 1e6)
    last_tick = now
  end)
  local started = uv.hrtime()
  cmd("AgentdOpen " .. sid)
  b = vim.api.nvim_get_current_buf()
  wait_for("all events", function()
    local n = vim.api.nvim_buf_line_count(b)
    if n > 10 and n < 2 * N then
      partial = true
    end
    -- Only the tail is read: scanning the whole buffer each poll would be the stall.
    local tail = vim.api.nvim_buf_get_lines(b, math.max(0, n - 3), n, false)
    for _, l in ipairs(tail) do
      if l == "[" .. N .. "] user" then
        return true
      end
    end
    return false
  end, 120000, nil)
  timer:stop()
  timer:close()
  log(("    %d events in %.0f ms, longest stall of the loop %.0f ms"):format(N, (uv.hrtime() - started) / 1e6, max_gap))
  assert(partial, "the transcript never showed a partly loaded state")
  assert(max_gap < 1500, ("the editor froze for %.0f ms"):format(max_gap))
  assert_contiguous(b, N)
  wait_line(b, "^state: live")
end)

test("diff and undo turn in a git workspace; a conflict asks before forcing", function()
  local gws = vim.fn.tempname() .. "-gitws"
  vim.fn.mkdir(gws, "p")
  gws = uv.fs_realpath(gws)
  local function path(f)
    return gws .. "/" .. f
  end
  local function read(f)
    local h = io.open(path(f), "rb")
    if not h then
      return nil
    end
    local s = h:read("*a")
    h:close()
    return s
  end
  local function write(f, s)
    local h = assert(io.open(path(f), "wb"))
    h:write(s)
    h:close()
  end
  local git = { "git", "-C", gws, "-c", "user.name=t", "-c", "user.email=t@example.com" }
  local function g(...)
    local args = vim.list_extend(vim.deepcopy(git), { ... })
    return sh(args)
  end
  g("init", "-q")
  write("a.txt", "orig\n")
  g("add", "a.txt")
  g("commit", "-q", "-m", "init")
  local head = g("rev-parse", "HEAD")
  local wf = function(p, content)
    return { name = "write_file", args = { path = p, content = content } }
  end
  local script = gws .. ".json"
  local h = assert(io.open(script, "w"))
  h:write(vim.json.encode({
    rules = {
      {
        match = "one",
        steps = {
          { tool_calls = { wf("a.txt", "agent1\n"), { name = "shell", args = { command = "echo new > n.txt" } } } },
          { text = "one done" },
        },
      },
      { match = "two", steps = { { tool_calls = { wf("a.txt", "agent2\n") } }, { text = "two done" } } },
    },
  }))
  h:close()
  local c = agentd.client()
  local e, r = c:request_sync("agentd/create", { workspace = gws, model = "script:" .. script }, 10000)
  assert(not e, vim.inspect(e))
  local sid = r.session_id
  for _, input in ipairs({ "one", "two" }) do
    e, r = c:request_sync("agentd/turn", { session_id = sid, input = input }, 60000)
    assert(not e and r.status == "completed", vim.inspect(e or r))
  end

  -- The diff of the last turn, then of the whole session, in a diff buffer.
  cmd("AgentdDiff " .. sid)
  wait_for("the turn's diff buffer", function()
    return cur_buf_name() == "agentd://diff/" .. sid .. "/turn"
  end)
  local b = vim.api.nvim_get_current_buf()
  assert(vim.bo[b].filetype == "diff")
  assert(has_line(b, "# modified a.txt (+1 -1)", true), dump(b))
  assert(has_line(b, "-agent1", true) and has_line(b, "+agent2", true), dump(b))
  assert(not has_line(b, "n.txt", true), dump(b))
  cmd("AgentdDiff session " .. sid)
  wait_for("the session's diff buffer", function()
    return cur_buf_name() == "agentd://diff/" .. sid .. "/session"
  end)
  b = vim.api.nvim_get_current_buf()
  assert(has_line(b, "# added n.txt (+1 -0)", true), dump(b))
  assert(has_line(b, "-orig", true) and has_line(b, "+agent2", true), dump(b))

  -- Undo turn "two".
  cmd("AgentdUndoTurn " .. sid)
  -- The notice comes after the daemon answered, that is after the revert finished.
  wait_for("the undo notice", function()
    return noted("undid the turn: restored 1 file%(s%)")
  end)
  assert(read("a.txt") == "agent1\n", read("a.txt"))
  assert(read("n.txt") == "new\n")

  -- The user edits a.txt: undoing turn "one" asks, and Cancel changes nothing.
  write("a.txt", "user edit\n")
  local asked = select_answer("Cancel")
  cmd("AgentdUndoTurn " .. sid)
  wait_for("the cancel notice", function()
    return noted("undo cancelled: nothing changed")
  end)
  assert(#asked == 1 and asked[1].prompt:find("a.txt", 1, true), vim.inspect(asked))
  assert(read("a.txt") == "user edit\n" and read("n.txt") == "new\n")

  -- Overwrite: forced to the same point.
  asked = select_answer("Overwrite")
  cmd("AgentdUndoTurn " .. sid)
  wait_for("the forced undo notice", function()
    return noted("undid the turn: restored 2 file%(s%)")
  end)
  assert(#asked == 1, vim.inspect(asked))
  assert(read("a.txt") == "orig\n", read("a.txt"))
  assert(read("n.txt") == nil, "n.txt is still there")
  cmd("AgentdUndoTurn " .. sid)
  wait_for("nothing left to undo", function()
    return noted("no turn of " .. vim.pesc(sid) .. " left to undo")
  end)

  -- The user's repository is as it was.
  assert(g("rev-parse", "HEAD") == head)
  assert(g("status", "--porcelain") == "", g("status", "--porcelain"))
  assert(g("stash", "list") == "")
end)

local failed = 0
for _, t in ipairs(tests) do
  local t0 = uv.hrtime()
  local ok, e = xpcall(t.fn, debug.traceback)
  local ms = (uv.hrtime() - t0) / 1e6
  if ok then
    log(("ok   %s (%.0f ms)"):format(t.name, ms))
  else
    failed = failed + 1
    log(("FAIL %s (%.0f ms)\n%s"):format(t.name, ms, e))
  end
end
log(("%d tests, %d failed (Neovim %s)"):format(#tests, failed, tostring(vim.version().major) .. "." .. tostring(vim.version().minor) .. "." .. tostring(vim.version().patch)))
if failed > 0 then
  vim.cmd("cquit 1")
else
  vim.cmd("qall!")
end
