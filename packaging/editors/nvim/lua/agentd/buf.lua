-- Scratch buffers the plugin owns: named `agentd://...`, never written, read-only to
-- the user. Only the plugin changes their lines, through `set_lines`.

local M = {}

--- The buffer named `name`, created (and configured) when missing.
function M.scratch(name, filetype)
  for _, b in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_valid(b) and vim.api.nvim_buf_get_name(b) == name then
      return b, false
    end
  end
  local b = vim.api.nvim_create_buf(true, true)
  vim.api.nvim_buf_set_name(b, name)
  local o = vim.bo[b]
  o.buftype = "nofile"
  o.bufhidden = "hide"
  o.swapfile = false
  o.modifiable = false
  o.filetype = filetype
  return b, true
end

--- Replaces lines [first, last) like nvim_buf_set_lines, lifting 'modifiable' meanwhile.
function M.set_lines(b, first, last, lines)
  if not vim.api.nvim_buf_is_valid(b) then
    return
  end
  local o = vim.bo[b]
  o.modifiable = true
  vim.api.nvim_buf_set_lines(b, first, last, false, lines)
  o.modifiable = false
  o.modified = false
end

--- Shows buffer `b` in the current window.
function M.show(b)
  vim.api.nvim_win_set_buf(0, b)
end

--- Splits `s` into lines (a trailing newline adds no empty line).
function M.split_lines(s)
  s = tostring(s or "")
  local out = {}
  for line in (s .. "\n"):gmatch("(.-)\r?\n") do
    out[#out + 1] = line
  end
  if #out > 1 and out[#out] == "" then
    out[#out] = nil
  end
  return out
end

return M
