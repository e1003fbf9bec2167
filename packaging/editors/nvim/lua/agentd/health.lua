-- :checkhealth agentd — Neovim version, agentctl, socket, and whether the daemon answers.

local M = {}

-- vim.health (0.8+: report_*, 0.9+: start/ok/...) or the 0.7 `health` module.
local function reporter()
  local h = vim.health or require("health")
  return {
    start = h.start or h.report_start,
    ok = h.ok or h.report_ok,
    warn = h.warn or h.report_warn,
    error = h.error or h.report_error,
    info = h.info or h.report_info,
  }
end

function M.check()
  local r = reporter()
  local agentd = require("agentd")
  local cfg = agentd.config
  r.start("agentd")

  if vim.fn.has("nvim-0.7") == 1 then
    r.ok("Neovim " .. tostring(vim.version().major) .. "." .. tostring(vim.version().minor))
  else
    r.error("Neovim 0.7 or newer is required")
  end

  local agentctl = vim.fn.exepath(cfg.agentctl)
  if agentctl ~= "" then
    r.ok("agentctl: " .. agentctl)
  elseif cfg.socket then
    r.warn("agentctl not found (" .. cfg.agentctl .. "); the configured socket is used without it")
  else
    r.error("agentctl not found: " .. cfg.agentctl, {
      "put agentctl on PATH (cargo build --release; target/release)",
      "or require('agentd').setup({ agentctl = '/path/to/agentctl' })",
    })
  end

  local socket = cfg.socket
  if socket then
    r.info("socket (configured): " .. socket)
  elseif agentctl ~= "" then
    local out = vim.fn.system({ agentctl, "socket-path" })
    if vim.v.shell_error == 0 then
      socket = vim.trim(out)
      r.ok("socket (from agentctl socket-path, which starts the daemon if needed): " .. socket)
    else
      r.error("`agentctl socket-path` failed: " .. vim.trim(out))
    end
  end
  if not socket then
    return
  end

  local client = agentd.client()
  local e, hello = client:request_sync("agentd/hello", { client = "agentd.nvim" }, 3000)
  if e then
    r.error("the daemon does not answer on " .. socket .. ": " .. tostring(e.message), {
      "start it with `agentctl daemon start`",
    })
    return
  end
  r.ok(("daemon %s %s (pid %s, home %s)"):format(hello.server, hello.version, tostring(hello.pid), hello.home))
  if hello.protocol_version == 1 then
    r.ok("protocol version 1")
  else
    r.error("protocol version " .. tostring(hello.protocol_version) .. "; this plugin speaks 1")
  end
  local se, st = client:request_sync("agentd/status", vim.empty_dict(), 3000)
  if se then
    r.warn("agentd/status failed: " .. tostring(se.message))
  else
    r.ok(("%d sessions, %d loaded, %d turns running, durability %s"):format(
      st.sessions_total,
      st.sessions_loaded,
      st.turns_running,
      st.durability
    ))
  end
end

return M
