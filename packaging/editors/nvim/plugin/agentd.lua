-- User commands of the agentd plugin; the work happens in lua/agentd (loaded on first use).
if vim.g.loaded_agentd then
  return
end
vim.g.loaded_agentd = true

if vim.fn.has("nvim-0.7") == 0 then
  vim.api.nvim_err_writeln("agentd: needs Neovim 0.7 or newer")
  return
end

local function agentd()
  return require("agentd")
end

local cmd = vim.api.nvim_create_user_command

cmd("AgentdList", function()
  agentd().list()
end, { desc = "agentd: sessions of the current directory" })

cmd("AgentdOpen", function(a)
  agentd().open(a.args)
end, {
  nargs = 1,
  complete = function(lead)
    return agentd().complete_sessions(lead)
  end,
  desc = "agentd: open a session transcript",
})

cmd("AgentdPrompt", function(a)
  agentd().prompt(a.args)
end, { nargs = "+", desc = "agentd: run a turn in this session (or a new one here)" })

cmd("AgentdSteer", function(a)
  agentd().steer(a.args)
end, { nargs = "+", desc = "agentd: add input to the running turn (sent with its next provider call)" })

cmd("AgentdQueue", function(a)
  agentd().queue(a.args)
end, { nargs = "+", desc = "agentd: queue a prompt behind the running turn" })

cmd("AgentdInterrupt", function()
  agentd().interrupt()
end, { desc = "agentd: interrupt the running turn" })

cmd("AgentdFork", function()
  agentd().fork()
end, { desc = "agentd: fork the session at the event under the cursor" })

cmd("AgentdCompact", function(a)
  agentd().compact(a.args)
end, { nargs = "?", desc = "agentd: compact the session's history" })

cmd("AgentdTree", function()
  agentd().tree()
end, { desc = "agentd: fork tree of this session (or of the current directory)" })

cmd("AgentdDiff", function(a)
  agentd().diff(a.args)
end, { nargs = "*", desc = "agentd: what the last turn (or `session`: the whole session) changed, as a diff" })

cmd("AgentdUndoTurn", function(a)
  agentd().undo_turn(a.args)
end, { nargs = "?", desc = "agentd: put the files back as they were before the last turn that changed them" })
