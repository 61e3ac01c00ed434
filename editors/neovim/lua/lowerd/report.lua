-- The lowerd.report answer ({config, error, targets, building}) as text: quickfix items, summary
-- lines, statusline text. Files in the report are relative to the project root.

local M = {}

-- JSON null arrives as vim.NIL.
local function value(x)
  if x == vim.NIL then
    return nil
  end
  return x
end

local function plural(count, noun)
  return count == 1 and (count .. " " .. noun) or (count .. " " .. noun .. "s")
end

-- Rounded down, so that 100 % means every op is delegated.
function M.percent(delegated, ops)
  if ops <= 0 then
    return 0
  end
  if delegated >= ops then
    return 100
  end
  return math.floor(delegated * 100 / ops)
end

local function sorted_keys(map)
  local keys = {}
  for key in pairs(value(map) or {}) do
    table.insert(keys, key)
  end
  table.sort(keys)
  return keys
end

local function delegating_backends(method)
  local found = {}
  local backends = value(method.backends) or {}
  for _, name in ipairs(sorted_keys(backends)) do
    local totals = backends[name]
    if (value(totals.ops) or 0) > 0 then
      table.insert(found, { name = name, ops = totals.ops, partitions = value(totals.partitions) or 0 })
    end
  end
  table.sort(found, function(a, b)
    return a.ops > b.ops
  end)
  return found
end

-- "forward: 231 of 271 ops on XNNPACK in 42 partitions (85 %)", as the server's code lens says.
function M.method_summary(name, method)
  local ops, delegated = value(method.ops) or 0, value(method.ops_delegated) or 0
  local percent = M.percent(delegated, ops)
  local backends = delegating_backends(method)
  if #backends == 0 then
    return string.format("%s: 0 of %d ops delegated (0 %%)", name, ops)
  end
  if #backends == 1 then
    local only = backends[1]
    return string.format("%s: %d of %d ops on %s in %s (%d %%)", name, delegated, ops, only.name,
      plural(only.partitions, "partition"), percent)
  end
  local each = {}
  for _, backend in ipairs(backends) do
    table.insert(each, string.format("%d on %s in %s", backend.ops, backend.name,
      plural(backend.partitions, "partition")))
  end
  return string.format("%s: %d of %d ops delegated (%s; %d %%)", name, delegated, ops,
    table.concat(each, ", "), percent)
end

local function absolute(root, file)
  if file:sub(1, 1) == "/" then
    return file
  end
  return root .. "/" .. file
end

local function targets(result)
  return value(result and result.targets) or {}
end

-- Quickfix items: each failed target at its error's line, each op left on the CPU at its line.
function M.quickfix(result, root)
  local items = {}
  local config_error = value(result.error)
  if config_error then
    table.insert(items, {
      filename = absolute(root, value(config_error.file) or "pyproject.toml"),
      lnum = value(config_error.line) or 1,
      text = "config-error: " .. (value(config_error.message) or ""),
      type = "E",
    })
  end
  for _, target in ipairs(targets(result)) do
    local err = value(target.error)
    if target.status == "error" and err then
      local site = value(err.file) and err or value(target.entry) or {}
      table.insert(items, {
        filename = value(site.file) and absolute(root, site.file) or nil,
        lnum = value(site.line) or 1,
        text = string.format("%s: %s: %s", target.name, value(err.kind) or "error",
          value(err.message) or ""),
        type = "E",
      })
    end
    for _, method in ipairs(sorted_keys(target.methods)) do
      for _, op in ipairs(value(target.methods[method].not_delegated) or {}) do
        local file = value(op.file)
        table.insert(items, {
          filename = file and absolute(root, file) or nil,
          lnum = value(op.line) or 1,
          text = string.format("%s.%s: %s not delegated: %s", target.name, method, op.op, op.reason),
          type = "W",
        })
      end
    end
  end
  return items
end

-- One line per target and method, for nvim_echo.
function M.summary_chunks(result)
  local chunks = {}
  local config_error = value(result.error)
  if config_error then
    table.insert(chunks, { "lowerd: config error: " .. (value(config_error.message) or "") .. "\n",
      "ErrorMsg" })
  end
  for _, target in ipairs(targets(result)) do
    if target.status == "error" then
      local err = value(target.error) or {}
      table.insert(chunks, { string.format("%s: failed (%s)\n", target.name,
        value(err.kind) or "error"), "ErrorMsg" })
    elseif target.status ~= "ok" then
      table.insert(chunks, { target.name .. ": not built yet\n", "Comment" })
    else
      for _, method in ipairs(sorted_keys(target.methods)) do
        table.insert(chunks, { target.name .. " · "
          .. M.method_summary(method, target.methods[method]) .. "\n", "Normal" })
      end
    end
  end
  if #chunks == 0 then
    table.insert(chunks, { "lowerd: no targets\n", "Comment" })
  end
  return chunks
end

local function touches(target, root, file)
  local function same(candidate)
    candidate = value(candidate)
    return candidate ~= nil and absolute(root, candidate) == file
  end
  local entry, err = value(target.entry), value(target.error)
  if (entry and same(entry.file)) or (err and same(err.file)) then
    return true
  end
  for _, site in pairs(value(target.modules) or {}) do
    if same(site.file) then
      return true
    end
  end
  for _, method in pairs(value(target.methods) or {}) do
    for _, op in ipairs(value(method.not_delegated) or {}) do
      if same(op.file) then
        return true
      end
    end
    for _, partition in ipairs(value(method.partitions) or {}) do
      for _, source in ipairs(value(partition.sources) or {}) do
        if same(source[1]) then
          return true
        end
      end
    end
  end
  return false
end

-- "XNNPACK 85 %" over the targets touching `file` (all targets if none does), or
-- "lowerd: net failed".
function M.status_text(result, root, file)
  if value(result.error) then
    return "lowerd: config error"
  end
  local shown = {}
  for _, target in ipairs(targets(result)) do
    if touches(target, root, file) then
      table.insert(shown, target)
    end
  end
  if #shown == 0 then
    shown = targets(result)
  end
  local failed, ops, delegated, per_backend = {}, 0, 0, {}
  for _, target in ipairs(shown) do
    if target.status == "error" then
      table.insert(failed, target.name)
    end
    for _, method in pairs(value(target.methods) or {}) do
      ops = ops + (value(method.ops) or 0)
      delegated = delegated + (value(method.ops_delegated) or 0)
      for _, backend in ipairs(delegating_backends(method)) do
        per_backend[backend.name] = (per_backend[backend.name] or 0) + backend.ops
      end
    end
  end
  if #failed > 0 then
    return "lowerd: " .. table.concat(failed, ", ") .. " failed"
  end
  local names = sorted_keys(per_backend)
  table.sort(names, function(a, b)
    return per_backend[a] > per_backend[b]
  end)
  local where = #names > 0 and table.concat(names, "+") or "CPU only"
  return string.format("%s %d %%", where, M.percent(delegated, ops))
end

-- "refused ok (1.2 s), net failed (export-error)" for a build command's answer.
function M.build_summary(result)
  local parts = {}
  for _, target in ipairs(targets(result)) do
    if target.status == "error" then
      local err = value(target.error) or {}
      table.insert(parts, string.format("%s failed (%s)", target.name, value(err.kind) or "error"))
    elseif target.status == "ok" then
      local seconds = value(target.seconds)
      table.insert(parts, seconds and string.format("%s ok (%.1f s)", target.name, seconds)
        or (target.name .. " ok"))
    else
      table.insert(parts, target.name .. " not built")
    end
  end
  local failure = value(result and result.error)
  if type(failure) == "string" then
    table.insert(parts, failure)
  end
  return #parts > 0 and table.concat(parts, ", ") or "nothing built"
end

return M
