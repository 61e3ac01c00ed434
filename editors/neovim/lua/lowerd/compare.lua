-- The server's lowerd.compare answer (what `lowerd compare --json` prints: the target lowered with
-- each backend alone) as the lines of a side-by-side table, laid out as the CLI's
-- (cli/compare_table.py). Pure: no client, no buffer; init.lua shows the lines.

local report = require("lowerd.report")

local M = {}

-- Ops left on the CPU shown per backend, as the CLI shows them.
local TOP_OPS = 5

-- JSON null arrives as vim.NIL.
local function value(x)
  if x == vim.NIL then
    return nil
  end
  return x
end

local function plural(count, noun, suffix)
  return count .. " " .. noun .. (count == 1 and "" or suffix)
end

local function cache_text(column)
  if value(column.reused) == "up-to-date" then
    return "up to date"
  end
  local cache = value(column.cache) or {}
  local hits, misses = value(cache.hits) or 0, value(cache.misses) or 0
  local parts = {}
  if hits > 0 then
    table.insert(parts, plural(hits, "hit", "s"))
  end
  if misses > 0 then
    table.insert(parts, plural(misses, "miss", "es"))
  end
  return #parts > 0 and table.concat(parts, ", ") or "-"
end

local ROWS = {
  { "coverage", function(c) return (value(c.coverage_percent) or 0) .. " %" end },
  { "ops on backend", function(c) return (value(c.ops_delegated) or 0) .. " of " .. (value(c.ops) or 0) end },
  { "partitions", function(c) return tostring(value(c.partitions) or 0) end },
  { ".pte", function(c)
    local bytes = value(c.pte_bytes)
    return bytes and report.format_size(bytes) or "-"
  end },
  { "cache", cache_text },
}

local function not_delegated(column)
  if column.status ~= "ok" then
    return {}
  end
  local groups = value(column.not_delegated) or {}
  if #groups == 0 then
    return { "none" }
  end
  local cells = {}
  for index, group in ipairs(groups) do
    if index > TOP_OPS then
      table.insert(cells, (#groups - TOP_OPS) .. " more ops")
      break
    end
    table.insert(cells, (value(group.count) or 0) .. "× " .. tostring(group.op))
  end
  return cells
end

-- Display width: "×" is one column, two bytes.
local function width(text)
  return vim.fn.strdisplaywidth(text)
end

local function pad(text, size)
  return text .. string.rep(" ", size - width(text))
end

-- The table's lines: a title, a header of backends, a row per fact, the ops each left on the CPU,
-- then each failed backend's error; or the one line saying why nothing was compared.
function M.lines(result)
  if type(result) ~= "table" then
    return { "lowerd: lowerd.compare gave no answer" }
  end
  local error = value(result.error)
  if type(error) == "string" and error ~= "" then
    return { "lowerd: " .. error }
  end
  local columns = value(result.backends) or {}
  if #columns == 0 then
    return { "lowerd: nothing compared" }
  end
  local rows = { { "" } }
  for _, column in ipairs(columns) do
    table.insert(rows[1], tostring(value(column.display) or column.backend))
  end
  for _, row in ipairs(ROWS) do
    local cells = { row[1] }
    for _, column in ipairs(columns) do
      table.insert(cells, column.status == "ok" and row[2](column) or "error")
    end
    table.insert(rows, cells)
  end
  local left, depth = {}, 0
  for index, column in ipairs(columns) do
    left[index] = not_delegated(column)
    depth = math.max(depth, #left[index])
  end
  for line = 1, depth do
    local cells = { line == 1 and "not delegated" or "" }
    for index = 1, #columns do
      table.insert(cells, left[index][line] or "")
    end
    table.insert(rows, cells)
  end
  local widths = {}
  for _, cells in ipairs(rows) do
    for index, cell in ipairs(cells) do
      widths[index] = math.max(widths[index] or 0, width(cell))
    end
  end
  local lines = { tostring(result.target) .. ", one backend at a time" }
  for _, cells in ipairs(rows) do
    local padded = {}
    for index, cell in ipairs(cells) do
      table.insert(padded, pad(cell, widths[index]))
    end
    table.insert(lines, (table.concat(padded, "  "):gsub("%s+$", "")))
  end
  for _, column in ipairs(columns) do
    local err = value(column.error)
    if type(err) == "table" then
      local file = value(err.file)
      local where = file and (" (" .. file .. (value(err.line) and (":" .. err.line) or "") .. ")") or ""
      table.insert(lines, tostring(value(column.display) or column.backend) .. ": "
        .. tostring(err.kind) .. where .. ": " .. tostring(err.message))
    end
  end
  return lines
end

return M
