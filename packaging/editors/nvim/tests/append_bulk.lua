-- Helper process for tests/run.lua: appends AGENTD_BULK_N user messages to session
-- AGENTD_BULK_SID in one agentd/append call, then creates the file AGENTD_BULK_DONE.
local sid = assert(os.getenv("AGENTD_BULK_SID"))
local n = assert(tonumber(os.getenv("AGENTD_BULK_N")))
local done = assert(os.getenv("AGENTD_BULK_DONE"))
local agentd = require("agentd")
agentd.setup({ socket = assert(os.getenv("AGENTD_SOCKET")) })
local events = {}
for i = 1, n do
  events[i] = { type = "user_message", data = { text = "bulk " .. i } }
end
local e = agentd.client():request_sync("agentd/append", { session_id = sid, events = events }, 60000)
if e then
  io.stderr:write("append_bulk: " .. vim.inspect(e) .. "\n")
  vim.cmd("cquit 1")
end
vim.fn.writefile({}, done)
vim.cmd("qall!")
