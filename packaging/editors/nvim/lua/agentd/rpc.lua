-- The connection to the daemon: JSON-RPC 2.0 over its Unix socket, one message per line.
--
-- One Client owns one pipe. It matches responses to calls, routes `agentd/event`
-- notifications and answers server->client requests (`agentd/permission`). When the
-- pipe breaks it fails every call in flight with `daemon_unavailable`, tells its
-- listeners, and (while anyone still follows a session) reconnects with backoff; the
-- listeners then resubscribe from the last seq they saw. Messages are handed to Lua
-- handlers through `vim.schedule`, in arrival order, so handlers may touch buffers.

local json = require("agentd.json")

local uv = vim.uv or vim.loop

local Client = {}
Client.__index = Client

-- A single line longer than this means a broken peer; the daemon's own cap is 16 MiB.
local MAX_LINE = 64 * 1024 * 1024

local function err(kind, message)
  return { code = -32000, message = message, data = { kind = kind } }
end

--- opts:
---   resolve_socket(cb)  finds the socket path; cb(path) or cb(nil, message)
---   on_state(state, message)  "connected" | "disconnected" | "reconnected" | "closed"
---   reconnect_min_ms, reconnect_max_ms  backoff bounds
---   wants_reconnect()  true while a reconnect is worth doing (someone follows a session)
function Client.new(opts)
  local self = setmetatable({}, Client)
  self.opts = opts
  self.state = "disconnected"
  self.next_id = 0
  self.pending = {}
  self.queue = {}
  self.request_handlers = {}
  self.notification_handlers = {}
  self.rbuf = {}
  self.rbuf_len = 0
  self.generation = 0
  self.ever_connected = false
  self.backoff = nil
  return self
end

function Client:on_request(method, fn)
  self.request_handlers[method] = fn
end

function Client:on_notification(method, fn)
  self.notification_handlers[method] = fn
end

function Client:is_connected()
  return self.state == "connected"
end

function Client:_emit_state(state, message)
  if self.opts.on_state then
    vim.schedule(function()
      self.opts.on_state(state, message)
    end)
  end
end

function Client:_write(msg)
  if not self.pipe or self.state ~= "connected" then
    return false
  end
  local ok, line = pcall(json.encode, msg)
  if not ok then
    return false, line
  end
  self.pipe:write(line .. "\n")
  return true
end

--- Starts connecting unless connected or already connecting.
function Client:connect()
  if self.state ~= "disconnected" then
    return
  end
  self.state = "connecting"
  self.opts.resolve_socket(function(path, why)
    if not path then
      self:_connect_failed(why or "no socket path")
      return
    end
    local pipe = uv.new_pipe(false)
    pipe:connect(path, function(cerr)
      if cerr then
        pipe:close()
        self:_connect_failed(("cannot connect to %s: %s"):format(path, cerr))
        return
      end
      self:_connected(pipe, path)
    end)
  end)
end

function Client:_connected(pipe, path)
  self.pipe = pipe
  self.path = path
  self.state = "connected"
  self.generation = self.generation + 1
  self.backoff = nil
  self.rbuf, self.rbuf_len = {}, 0
  local gen = self.generation
  pipe:read_start(function(rerr, chunk)
    if gen ~= self.generation then
      return
    end
    if rerr or not chunk then
      self:_lost(rerr and ("read error: " .. rerr) or "the daemon closed the connection")
      return
    end
    self:_feed(chunk)
  end)
  local again = self.ever_connected
  self.ever_connected = true
  local queued = self.queue
  self.queue = {}
  for _, msg in ipairs(queued) do
    self:_write(msg)
  end
  self:_emit_state(again and "reconnected" or "connected", path)
end

function Client:_connect_failed(why)
  self.state = "disconnected"
  local queued = self.queue
  self.queue = {}
  local cbs = {}
  for _, msg in ipairs(queued) do
    cbs[#cbs + 1] = self.pending[msg.id]
    self.pending[msg.id] = nil
  end
  vim.schedule(function()
    for _, cb in ipairs(cbs) do
      cb(err("daemon_unavailable", "agentd is not reachable: " .. why))
    end
  end)
  self:_schedule_reconnect(why)
end

function Client:_lost(why, state)
  if self.state ~= "connected" then
    return
  end
  self.generation = self.generation + 1
  self.state = "disconnected"
  local pipe = self.pipe
  self.pipe = nil
  if pipe and not pipe:is_closing() then
    pipe:read_stop()
    pipe:close()
  end
  local pending = self.pending
  self.pending = {}
  vim.schedule(function()
    for _, cb in pairs(pending) do
      cb(err("daemon_unavailable", "connection to agentd lost: " .. why))
    end
  end)
  self:_emit_state(state or "disconnected", why)
  self:_schedule_reconnect(why)
end

function Client:_schedule_reconnect(why)
  local wants = self.opts.wants_reconnect
  if not wants then
    return
  end
  local min_ms = self.opts.reconnect_min_ms or 200
  local max_ms = self.opts.reconnect_max_ms or 5000
  self.backoff = self.backoff and math.min(self.backoff * 2, max_ms) or min_ms
  local delay = self.backoff
  local timer = uv.new_timer()
  timer:start(delay, 0, function()
    timer:close()
    -- Asked on the main loop: the answer reads editor state.
    vim.schedule(function()
      if self.state == "disconnected" and wants() then
        self:connect()
      else
        self.backoff = nil
      end
    end)
  end)
  self.last_error = why
end

function Client:_feed(chunk)
  local start = 1
  local msgs = {}
  while true do
    local nl = chunk:find("\n", start, true)
    if not nl then
      break
    end
    local piece = chunk:sub(start, nl - 1)
    local line
    if self.rbuf_len > 0 then
      self.rbuf[#self.rbuf + 1] = piece
      line = table.concat(self.rbuf)
      self.rbuf, self.rbuf_len = {}, 0
    else
      line = piece
    end
    if line:find("%S") then
      msgs[#msgs + 1] = line
    end
    start = nl + 1
  end
  if start <= #chunk then
    local rest = chunk:sub(start)
    self.rbuf[#self.rbuf + 1] = rest
    self.rbuf_len = self.rbuf_len + #rest
    if self.rbuf_len > MAX_LINE then
      self:_lost("a message from the daemon exceeds 64 MiB")
      return
    end
  end
  if #msgs == 0 then
    return
  end
  local gen = self.generation
  vim.schedule(function()
    for _, line in ipairs(msgs) do
      if gen ~= self.generation then
        return
      end
      self:_dispatch(line)
    end
  end)
end

function Client:_dispatch(line)
  local msg, why = json.decode(line)
  if type(msg) ~= "table" then
    vim.notify("agentd: unreadable message from the daemon: " .. tostring(why), vim.log.levels.WARN)
    return
  end
  if msg.method ~= nil and msg.id ~= nil and msg.id ~= vim.NIL then
    self:_serve(msg)
  elseif msg.method ~= nil then
    local h = self.notification_handlers[msg.method]
    if h then
      h(msg.params)
    end
  elseif msg.id ~= nil then
    local cb = self.pending[msg.id]
    self.pending[msg.id] = nil
    if cb then
      if msg.error ~= nil and msg.error ~= vim.NIL then
        cb(msg.error, nil)
      else
        cb(nil, msg.result)
      end
    end
  end
end

-- A request from the daemon: the handler gets a `respond(result, error)` that answers once.
function Client:_serve(msg)
  local gen = self.generation
  local answered = false
  local function respond(result, e)
    if answered then
      return
    end
    answered = true
    if gen ~= self.generation then
      -- The connection that asked is gone; the daemon already counted it as a deny.
      return
    end
    if e then
      self:_write({ jsonrpc = "2.0", id = msg.id, error = e })
    else
      self:_write({ jsonrpc = "2.0", id = msg.id, result = result })
    end
  end
  local h = self.request_handlers[msg.method]
  if not h then
    respond(nil, { code = -32601, message = "method not found: " .. tostring(msg.method) })
    return
  end
  h(msg.params, respond)
end

--- Sends a call; cb(err, result) runs on the main loop. Connects first when needed.
function Client:request(method, params, cb)
  self.next_id = self.next_id + 1
  local id = self.next_id
  local msg = { jsonrpc = "2.0", id = id, method = method, params = params or vim.empty_dict() }
  self.pending[id] = cb or function() end
  if self.state == "connected" then
    local ok, why = self:_write(msg)
    if not ok then
      self.pending[id] = nil
      vim.schedule(function()
        (cb or function() end)(err("invalid_args", "cannot encode params: " .. tostring(why)))
      end)
    end
  else
    self.queue[#self.queue + 1] = msg
    self:connect()
  end
  return id
end

--- Calls and waits (processing events) up to timeout_ms; returns err, result.
function Client:request_sync(method, params, timeout_ms)
  local done, e, r = false, nil, nil
  self:request(method, params, function(e2, r2)
    done, e, r = true, e2, r2
  end)
  local ok = vim.wait(timeout_ms or 10000, function()
    return done
  end, 10)
  if not ok then
    return err("timeout", ("%s got no answer within %d ms"):format(method, timeout_ms or 10000))
  end
  return e, r
end

--- Drops the connection without reconnecting (used by :AgentdDisconnect and tests).
function Client:close()
  local wants = self.opts.wants_reconnect
  self.opts.wants_reconnect = nil
  if self.state == "connected" then
    self:_lost("closed by the editor", "closed")
  end
  self.opts.wants_reconnect = wants
end

return Client
