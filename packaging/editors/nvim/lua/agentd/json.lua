-- JSON encoding for the wire.
--
-- `vim.json.encode` prints numbers with 14 significant digits, which corrupts the
-- daemon's subscription ids (53-bit integers) and large seqs on the way back. This
-- encoder writes integral numbers exactly and delegates strings to `vim.json` so
-- escaping stays correct. Decoding uses `vim.json.decode` directly: it parses
-- integers below 2^53 exactly. Everything here is safe in luv callbacks (no Vimscript).

local M = {}

local islist = vim.islist or vim.tbl_islist

-- Marker for tables that must encode as `{}` even when empty.
local empty_dict_mt = getmetatable(vim.empty_dict())

local encode

local function encode_number(n)
  if n ~= n or n == math.huge or n == -math.huge then
    error("agentd.json: cannot encode a non-finite number")
  end
  if n == math.floor(n) and math.abs(n) < 2 ^ 63 then
    return string.format("%d", n)
  end
  return string.format("%.17g", n)
end

encode = function(v)
  local t = type(v)
  if v == nil or v == vim.NIL then
    return "null"
  elseif t == "boolean" then
    return v and "true" or "false"
  elseif t == "number" then
    return encode_number(v)
  elseif t == "string" then
    return vim.json.encode(v)
  elseif t == "table" then
    if next(v) == nil then
      if getmetatable(v) == empty_dict_mt then
        return "{}"
      end
      return "[]"
    end
    local parts = {}
    if islist(v) then
      for i = 1, #v do
        parts[i] = encode(v[i])
      end
      return "[" .. table.concat(parts, ",") .. "]"
    end
    local keys = {}
    for k in pairs(v) do
      if type(k) ~= "string" then
        error("agentd.json: object keys must be strings, got " .. type(k))
      end
      keys[#keys + 1] = k
    end
    -- Sorted keys make the bytes deterministic (easier to read in a trace).
    table.sort(keys)
    for i, k in ipairs(keys) do
      parts[i] = vim.json.encode(k) .. ":" .. encode(v[k])
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  error("agentd.json: cannot encode a " .. t)
end

M.encode = encode

--- Decodes one JSON document; returns nil and a message on malformed input.
function M.decode(s)
  local ok, v = pcall(vim.json.decode, s)
  if not ok then
    return nil, tostring(v)
  end
  return v
end

return M
