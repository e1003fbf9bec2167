-- A session transcript: the buffer `agentd://session/SID`, a read-only view of the Log.
--
-- It fills from the Log with paged `agentd/events` calls (one page per trip through the
-- event loop, so a huge session never freezes the editor) and then follows
-- `agentd/subscribe` with `after_seq` = the last seq it rendered. The daemon sends the
-- durable events after that seq before live ones, so resubscribing with the same rule
-- after a lost connection or a `lagged` notice leaves no gap; an event whose seq is not
-- above the last rendered one is dropped, so none shows twice. Ephemeral text deltas
-- are drawn in a streaming area at the end and replaced by the durable message.

local buf = require("agentd.buf")

local M = {}

local HEADER_LINES = 4
local STATE_LINE = 2 -- 0-based index of the "state:" line

local Transcript = {}
Transcript.__index = Transcript

-- All open transcripts by session id, and by subscription id for routing.
M.by_sid = {}
local by_sub = {}

local function short_json(v, max)
  local ok, s = pcall(vim.json.encode, v)
  s = ok and s or "?"
  if #s > max then
    s = s:sub(1, max) .. "…"
  end
  return s
end

local function indent(lines, out, max_lines)
  local n = #lines
  local shown = max_lines and math.min(n, max_lines) or n
  for i = 1, shown do
    out[#out + 1] = "    " .. lines[i]
  end
  if shown < n then
    out[#out + 1] = ("    … %d more lines"):format(n - shown)
  end
end

--- The lines an event renders to; the first one always starts with `[SEQ] `.
function M.render_event(ev, opts)
  local d = type(ev.data) == "table" and ev.data or {}
  local head = ("[%d] "):format(ev.seq)
  local out = {}
  local t = ev.type
  local function str(v)
    if v == nil or v == vim.NIL then
      return ""
    end
    return tostring(v)
  end
  if t == "session_started" and d.relation == "subagent" then
    -- A `task` call's child session (docs/subagents.md).
    out[1] = ("%ssubagent of %s (task %s)  %s"):format(
      head,
      str(d.parent_session_id),
      str(d.parent_call_id),
      str(d.workspace)
    )
  elseif t == "session_started" then
    out[1] = head .. "session started  " .. str(d.workspace)
  elseif t == "session_fork" then
    out[1] = ("%sforked from %s @%s"):format(head, str(d.parent_session_id), str(d.forked_to_seq))
  elseif t == "user_message" then
    out[1] = head .. "user"
    indent(buf.split_lines(str(d.text)), out)
  elseif t == "assistant_message" then
    local partial = type(d.metadata) == "table" and d.metadata.partial == true
    out[1] = head .. (partial and "assistant (partial)" or "assistant")
    indent(buf.split_lines(str(d.text)), out)
  elseif t == "reasoning" then
    out[1] = head .. "reasoning"
    local item = type(d.item) == "table" and d.item or {}
    local texts = {}
    if type(item.summary) == "table" then
      for _, s in ipairs(item.summary) do
        if type(s) == "table" and type(s.text) == "string" then
          texts[#texts + 1] = s.text
        end
      end
    end
    indent(buf.split_lines(table.concat(texts, "\n")), out, opts.max_output_lines)
  elseif t == "tool_call" then
    out[1] = ("%stool call %s %s"):format(head, str(d.name), short_json(d.args, 200))
  elseif t == "tool_result" then
    local ok = d.ok == true
    out[1] = ("%stool result %s (%s)"):format(head, ok and "ok" or "error", str(d.call_id))
    if type(d.subagent) == "table" then
      -- A `task` call's answer: the child that gave it (`:AgentdOpen` it).
      out[1] = out[1] .. "  subagent " .. str(d.subagent.session_id)
    end
    local body
    if ok then
      body = str(d.output)
    elseif type(d.error) == "table" then
      body = str(d.error.kind) .. ": " .. str(d.error.message)
    else
      body = str(d.output)
    end
    if body ~= "" then
      indent(buf.split_lines(body), out, opts.max_output_lines)
    end
  elseif t == "permission_decision" then
    out[1] = ("%spermission %s (%s)"):format(head, str(d.decision), str(d.call_id))
  elseif t == "provider_usage" then
    local u = type(d.usage) == "table" and d.usage or {}
    out[1] = ("%susage %s  %s in / %s out"):format(head, str(d.provider), str(u.input_tokens), str(u.output_tokens))
  elseif t == "turn_started" then
    out[1] = head .. "turn started  " .. str(d.model)
  elseif t == "turn_ended" then
    local e = type(d.error) == "table" and (": " .. str(d.error.kind) .. " " .. str(d.error.message)) or ""
    out[1] = head .. "turn ended  " .. str(d.status) .. e
  elseif t == "history_compaction" then
    local r = type(d.range) == "table" and d.range or {}
    out[1] = ("%scompaction %s  seq %s..%s"):format(head, str(d.strategy), str(r.from_seq), str(r.to_seq))
    if type(d.summary) == "string" then
      indent(buf.split_lines(d.summary), out, opts.max_output_lines)
    end
  elseif t == "branch_summary" then
    out[1] = head .. "branch summary"
    indent(buf.split_lines(str(d.summary)), out, opts.max_output_lines)
  elseif t == "session_info" then
    out[1] = head .. "title  " .. str(d.title)
  else
    out[1] = head .. tostring(t) .. "  " .. short_json(ev.data, 200)
  end
  return out
end

--- The transcript of `sid`, creating its buffer (and starting to load it) when missing.
function M.open(ctx, sid)
  local t = M.by_sid[sid]
  if t and vim.api.nvim_buf_is_valid(t.buf) then
    return t
  end
  t = setmetatable({
    ctx = ctx,
    sid = sid,
    last_seq = -1,
    live = false,
    loading = false, -- an agentd/events page is in flight
    subscribing = false, -- an agentd/subscribe is in flight
    needs_load = true, -- paging has not reached the end of the Log yet
    sub = nil,
    waiters = {},
    blocks = {}, -- { {line = 0-based first line, seq = n}, ... } ascending
    stream = nil, -- { start = 0-based line, text = "" }
    status = "idle",
    title = nil,
    workspace = nil,
  }, Transcript)
  t.buf = buf.scratch("agentd://session/" .. sid, "agentd")
  vim.b[t.buf].agentd_session_id = sid
  M.by_sid[sid] = t
  buf.set_lines(t.buf, 0, -1, {
    "agentd session " .. sid,
    "workspace ?",
    "state: loading",
    "",
  })
  vim.api.nvim_create_autocmd("BufWipeout", {
    buffer = t.buf,
    once = true,
    callback = function()
      t:close()
    end,
  })
  t:load()
  return t
end

function Transcript:set_state(text)
  self.state_text = text
  buf.set_lines(self.buf, STATE_LINE, STATE_LINE + 1, { ("state: %s · %s"):format(text, self.status) })
end

function Transcript:set_header()
  local title = self.title and ('  "' .. self.title .. '"') or ""
  buf.set_lines(self.buf, 0, 2, {
    "agentd session " .. self.sid .. title,
    "workspace " .. (self.workspace or "?"),
  })
end

-- Pages through the Log; each page is one call, rendered when its answer arrives.
function Transcript:load()
  if self.loading then
    return
  end
  self.loading = true
  self.live = false
  self:set_state("loading")
  local limit = self.ctx.config.page_size
  local function page()
    if M.by_sid[self.sid] ~= self then
      return
    end
    local params = { session_id = self.sid, limit = limit }
    if self.last_seq >= 0 then
      params.after_seq = self.last_seq
    end
    self.ctx.client:request("agentd/events", params, function(e, r)
      if M.by_sid[self.sid] ~= self then
        return
      end
      if e then
        self.loading = false
        if M.is_unavailable(e) then
          -- Paging resumes from last_seq once the connection is back.
          self:set_state("disconnected, reconnecting")
        else
          self:fail("loading events", e)
        end
        return
      end
      self:render_durable(r.events or {})
      local more = r.next_after_seq ~= nil and r.next_after_seq ~= vim.NIL
      if more and #(r.events or {}) > 0 then
        page()
      else
        self.loading = false
        self.needs_load = false
        self:subscribe()
      end
    end)
  end
  page()
end

function Transcript:fail(what, e)
  local kind = type(e.data) == "table" and e.data.kind or "error"
  local msg = ("agentd: %s for %s failed (%s): %s"):format(what, self.sid, tostring(kind), tostring(e.message))
  self:set_state("error: " .. tostring(kind))
  vim.notify(msg, vim.log.levels.ERROR)
end

function Transcript:subscribe()
  if self.sub then
    by_sub[self.sub] = nil
    local old = self.sub
    self.sub = nil
    if self.ctx.client:is_connected() then
      self.ctx.client:request("agentd/unsubscribe", { old }, nil)
    end
  end
  self.live = false
  self.subscribing = true
  -- The new subscription sends what the running step streamed so far as one catch-up
  -- delta (docs/api.md, "Late joiners"): the text shown until now would show twice.
  if self.stream then
    self:clear_stream_lines()
    self.stream = nil
  end
  -- Only the latest subscribe call counts; an older one that still succeeds is dropped,
  -- so no event (and no text delta) arrives twice.
  self.sub_gen = (self.sub_gen or 0) + 1
  local gen = self.sub_gen
  self:set_state("subscribing")
  local params = { session_id = self.sid, permissions = true }
  if self.last_seq >= 0 then
    params.after_seq = self.last_seq
  end
  self.ctx.client:request("agentd/subscribe", params, function(e, sub)
    local stale = gen ~= self.sub_gen or M.by_sid[self.sid] ~= self
    if stale then
      if not e then
        self.ctx.client:request("agentd/unsubscribe", { sub }, nil)
      end
      return
    end
    self.subscribing = false
    if e then
      if M.is_unavailable(e) then
        -- The reconnect will subscribe again.
        self:set_state("disconnected, reconnecting")
        return
      end
      self:fail("subscribing", e)
      return
    end
    self.sub = sub
    by_sub[sub] = self
    self.live = true
    self:set_state("live")
    local waiters = self.waiters
    self.waiters = {}
    for _, fn in ipairs(waiters) do
      fn()
    end
  end)
end

--- Runs fn once the transcript follows live events (now, if it already does).
function Transcript:when_live(fn)
  if self.live then
    fn()
  else
    self.waiters[#self.waiters + 1] = fn
  end
end

function Transcript:line_count()
  return vim.api.nvim_buf_line_count(self.buf)
end

function Transcript:clear_stream_lines()
  if self.stream and self.stream.start then
    buf.set_lines(self.buf, self.stream.start, -1, {})
    self.stream.start = nil
  end
end

function Transcript:draw_stream()
  local s = self.stream
  if not s or s.text == "" then
    return
  end
  local lines = { "… assistant (streaming)" }
  indent(buf.split_lines(s.text), lines)
  local start = s.start or self:line_count()
  buf.set_lines(self.buf, start, -1, lines)
  s.start = start
end

-- Renders durable events in seq order, skipping any already shown.
function Transcript:render_durable(events)
  local lines = {}
  local base = nil
  local header_dirty = false
  for _, ev in ipairs(events) do
    if type(ev.seq) == "number" and ev.seq > self.last_seq then
      if base == nil then
        self:clear_stream_lines()
        base = self:line_count()
        -- A fresh buffer has HEADER_LINES lines; the first event goes right after them.
      end
      self.blocks[#self.blocks + 1] = { line = base + #lines, seq = ev.seq }
      for _, l in ipairs(M.render_event(ev, self.ctx.config)) do
        lines[#lines + 1] = l
      end
      self.last_seq = ev.seq
      local d = type(ev.data) == "table" and ev.data or {}
      if ev.type == "session_started" then
        self.workspace = d.workspace
        if type(d.title) == "string" then
          self.title = d.title
        end
        header_dirty = true
      elseif ev.type == "session_info" and type(d.title) == "string" then
        self.title = d.title
        header_dirty = true
      elseif ev.type == "turn_started" then
        self.status = "running"
      elseif ev.type == "turn_ended" or ev.type == "turn_failed" then
        self.status = "idle"
      end
      if ev.type == "assistant_message" or ev.type == "turn_ended" then
        self.stream = nil
      end
    end
  end
  if base then
    buf.set_lines(self.buf, base, base, lines)
    if header_dirty then
      self:set_header()
    end
    self:set_state(self.state_text or "loading")
    self:draw_stream()
  end
end

function Transcript:on_event(ev)
  if type(ev) ~= "table" then
    return
  end
  if ev.type == "lagged" then
    self.lagged = (self.lagged or 0) + 1
    -- The daemon dropped this subscription; pick up from the last rendered seq.
    self:subscribe()
    return
  end
  if ev.seq ~= nil and ev.seq ~= vim.NIL then
    if type(ev.seq) == "number" and self.last_seq >= 0 and ev.seq > self.last_seq + 1 then
      -- Never render past a hole: resubscribing from the last rendered seq refills it.
      self.gaps = (self.gaps or 0) + 1
      vim.notify(
        ("agentd: %s: event %d arrived after %d; resubscribing"):format(self.sid, ev.seq, self.last_seq),
        vim.log.levels.WARN
      )
      self:subscribe()
      return
    end
    self:render_durable({ ev })
    return
  end
  if ev.type == "text_delta" and type(ev.data) == "table" and type(ev.data.text) == "string" then
    self.stream = self.stream or { text = "" }
    self.stream.text = self.stream.text .. ev.data.text
    self:draw_stream()
  end
end

--- The seq of the event whose lines contain 1-based `lnum`, or nil.
function Transcript:seq_at(lnum)
  local line = lnum - 1
  local lo, hi, found = 1, #self.blocks, nil
  while lo <= hi do
    local mid = math.floor((lo + hi) / 2)
    if self.blocks[mid].line <= line then
      found = mid
      lo = mid + 1
    else
      hi = mid - 1
    end
  end
  return found and self.blocks[found].seq or nil
end

function Transcript:on_disconnected()
  self.live = false
  if self.sub then
    by_sub[self.sub] = nil
    self.sub = nil
  end
  if self.stream then
    self:clear_stream_lines()
    self.stream = nil
  end
  self:set_state("disconnected, reconnecting")
end

--- After a (re)connect: picks up where the transcript stopped, unless a call is in flight.
function Transcript:on_connected()
  if self.live or self.loading or self.subscribing then
    return
  end
  if self.needs_load then
    self:load()
  else
    self:subscribe()
  end
end

function Transcript:close()
  if M.by_sid[self.sid] == self then
    M.by_sid[self.sid] = nil
  end
  if self.sub then
    by_sub[self.sub] = nil
    if self.ctx.client:is_connected() then
      self.ctx.client:request("agentd/unsubscribe", { self.sub }, nil)
    end
    self.sub = nil
  end
end

function M.is_unavailable(e)
  return type(e) == "table" and type(e.data) == "table" and e.data.kind == "daemon_unavailable"
end

--- Routes an `agentd/event` notification to its transcript.
function M.dispatch(params)
  if type(params) ~= "table" then
    return
  end
  local t = by_sub[params.subscription]
  if t then
    t:on_event(params.result)
  end
end

function M.any_open()
  return next(M.by_sid) ~= nil
end

function M.each(fn)
  for _, t in pairs(M.by_sid) do
    fn(t)
  end
end

--- The transcript shown in buffer `b`, if any.
function M.for_buf(b)
  local sid = vim.b[b].agentd_session_id
  local t = sid and M.by_sid[sid]
  if t and t.buf == b then
    return t
  end
  return nil
end

return M
