-- Seeing and undoing what a session changed in the workspace: `agentd/diff` of the last
-- turn that changed files or of the whole session, and "undo turn", an `agentd/revert`
-- to the seq right before the last turn that changed files and is not undone yet. A
-- `conflict` answer names the files someone else changed; overwriting them takes a
-- second, forced call that the caller makes only after the user confirmed.

local M = {}

local PAGE = 1000

local function is_null(v)
  return v == nil or v == vim.NIL
end

--- The session's events of `types`, every page; cb(err, events).
local function load_events(client, sid, types, cb)
  local out = {}
  local function page(after)
    local p = { session_id = sid, types = types, limit = PAGE }
    if after then
      p.after_seq = after
    end
    client:request("agentd/events", p, function(e, r)
      if e then
        return cb(e)
      end
      local evs = type(r) == "table" and r.events or {}
      for _, ev in ipairs(evs) do
        out[#out + 1] = ev
      end
      if #evs < PAGE or is_null(r.next_after_seq) then
        return cb(nil, out)
      end
      page(r.next_after_seq)
    end)
  end
  page(nil)
end

--- The last turn that changed files (an `after` snapshot with a tree) and that no later
--- revert took back; cb(err, {turn_id, start_seq} or nil).
function M.last_changing_turn(client, sid, cb)
  load_events(client, sid, { "turn_started", "workspace_snapshot", "workspace_revert" }, function(e, evs)
    if e then
      return cb(e)
    end
    local turns, reverts = {}, {}
    for _, ev in ipairs(evs) do
      local d = type(ev.data) == "table" and ev.data or {}
      if ev.type == "turn_started" then
        turns[#turns + 1] = { turn_id = d.turn_id, start_seq = ev.seq, changed = false }
      elseif ev.type == "workspace_snapshot" then
        local cur = turns[#turns]
        if cur and d.reason == "after" and type(d.tree) == "string" then
          cur.changed = true
        end
      elseif ev.type == "workspace_revert" and type(d.to_seq) == "number" then
        reverts[#reverts + 1] = { seq = ev.seq, to_seq = d.to_seq }
      end
    end
    for i = #turns, 1, -1 do
      local t = turns[i]
      if t.changed then
        local undone = false
        for _, r in ipairs(reverts) do
          if r.seq > t.start_seq and r.to_seq < t.start_seq then
            undone = true
          end
        end
        if not undone then
          return cb(nil, { turn_id = t.turn_id, start_seq = t.start_seq })
        end
      end
    end
    cb(nil, nil)
  end)
end

--- `agentd/diff` for scope "turn" (the last turn that changed files) or "session";
--- cb(err, result).
function M.diff(client, sid, scope, cb)
  if scope == "session" then
    return client:request("agentd/diff", { session_id = sid }, cb)
  end
  M.last_changing_turn(client, sid, function(e, t)
    if e then
      return cb(e)
    end
    if not t then
      return cb({ message = "no turn of this session changed any file", data = { kind = "not_found" } })
    end
    client:request("agentd/diff", { session_id = sid, turn_id = t.turn_id }, cb)
  end)
end

--- Reverts to the seq before the last turn that changed files. cb(err, outcome) with
--- outcome.kind "nothing", "reverted" ({to_seq, files}) or "conflict" ({to_seq,
--- conflicts, message}). `opts.force` overwrites; `opts.to_seq` skips the lookup.
function M.undo(client, sid, opts, cb)
  opts = opts or {}
  local function revert(to_seq)
    client:request(
      "agentd/revert",
      { session_id = sid, to_seq = to_seq, force = opts.force == true },
      function(e, r)
        if e then
          local data = type(e) == "table" and type(e.data) == "table" and e.data or {}
          if data.kind == "conflict" then
            local details = type(data.details) == "table" and data.details or {}
            local files = type(details.files) == "table" and details.files or {}
            return cb(nil, { kind = "conflict", to_seq = to_seq, conflicts = files, message = e.message })
          end
          return cb(e)
        end
        local files = type(r) == "table" and type(r.files) == "table" and r.files or {}
        cb(nil, { kind = "reverted", to_seq = to_seq, files = files })
      end
    )
  end
  if opts.to_seq then
    return revert(opts.to_seq)
  end
  M.last_changing_turn(client, sid, function(e, t)
    if e then
      return cb(e)
    end
    if not t then
      return cb(nil, { kind = "nothing" })
    end
    revert(t.start_seq - 1)
  end)
end

return M
