-- The lowerd.report answer ({config, error, targets, building}: ReportAnswer in
-- docs/schema/lowerd.schema.json) as text: quickfix items, summary lines, statusline text. Files in the report are relative to the project root. Coverage
-- sentences, percents and fix hints are the server's (a method's summary, coverage_percent and
-- fixes_hint, a target's coverage): shown as sent, never computed here.

local M = {}

-- JSON null arrives as vim.NIL.
local function value(x)
  if x == vim.NIL then
    return nil
  end
  return x
end

local function times(op, count)
  return count == 1 and op or string.format("%s ×%d", op, count)
end

local function sorted_keys(map)
  local keys = {}
  for key in pairs(value(map) or {}) do
    table.insert(keys, key)
  end
  table.sort(keys)
  return keys
end

-- "forward: 231 of 271 ops on XNNPACK in 42 partitions (85 %)": the method's name and the
-- server's sentence (its `summary`), then the server's `fixes_hint` after a semicolon. The name
-- alone from an older server that sends no sentence: nothing is computed here.
function M.method_line(name, method)
  local summary, hint = value(method.summary), value(method.fixes_hint)
  local line = type(summary) == "string" and (name .. ": " .. summary) or name
  return type(hint) == "string" and (line .. "; " .. hint) or line
end

-- "forward: edge generation: stock (2 methods)": the server's words for which way the method's
-- edge generation ran (by region, or stock's and the gate that refused); nil when the report
-- does not say (a kept .pte, an older server).
function M.edge_generation_line(name, method)
  local generation = value(method.edge_generation)
  local words = type(generation) == "table" and value(generation.words) or nil
  return type(words) == "string" and (name .. ": edge generation: " .. words) or nil
end

-- A byte count as the CLI writes it (cache/location.py format_size): "512 B", "1.5 KiB".
function M.format_size(bytes)
  local units = { "B", "KiB", "MiB", "GiB", "TiB" }
  local size, unit = bytes, 1
  while unit < #units and math.floor(size * 10 + 0.5) / 10 >= 1024 do
    size, unit = size / 1024, unit + 1
  end
  local text = string.format("%.1f", size):gsub("%.0$", "")
  return text .. " " .. units[unit]
end

-- ".pte 4.2 KiB (constants 0 B, delegate blobs 1.4 KiB, delegate weights 576 B); forward:
-- planned memory 192 B": the server's sizes of a target, as the CLI prints them; nil when the
-- report has none (an older server, a target not built).
function M.sizes_line(target)
  local sizes = value(target.sizes)
  if type(sizes) ~= "table" or type(value(sizes.pte_bytes)) ~= "number" then
    return nil
  end
  local parts = { "constants " .. M.format_size(value(sizes.constant_bytes) or 0) }
  local blobs, weights = value(sizes.delegate_blob_bytes) or 0, value(sizes.delegate_data_bytes) or 0
  if blobs > 0 then
    table.insert(parts, "delegate blobs " .. M.format_size(blobs))
  end
  if weights > 0 then
    table.insert(parts, "delegate weights " .. M.format_size(weights))
  end
  local line = string.format(".pte %s (%s)", M.format_size(sizes.pte_bytes), table.concat(parts, ", "))
  local planned = {}
  for _, name in ipairs(sorted_keys(target.methods)) do
    local bytes = value(target.methods[name].planned_memory_bytes)
    if type(bytes) == "number" then
      table.insert(planned, name .. ": planned memory " .. M.format_size(bytes))
    end
  end
  return #planned > 0 and (line .. "; " .. table.concat(planned, ", ")) or line
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
      for _, cause in ipairs(M.causes(target.methods[method])) do
        local label = target.name .. "." .. method
        table.insert(items, {
          filename = cause.file and absolute(root, cause.file) or nil,
          lnum = cause.line or 1,
          text = string.format("%s: %s not delegated: %s%s", label, times(cause.op, cause.count),
            cause.reason, cause.where ~= "" and (" (" .. cause.where .. ")") or ""),
          type = "W",
        })
        if cause.library then
          table.insert(items, {
            filename = absolute(root, cause.library.file),
            lnum = cause.library.line,
            text = string.format("%s: %s made here%s", label, times(cause.op, cause.count),
              cause.function_name and (", in " .. cause.function_name) or ""),
            type = "I",
          })
        end
      end
    end
  end
  return items
end

local function short_class(name)
  name = value(name)
  return name and name:match("([^.]+)$") or nil
end

local function frame(raw)
  raw = value(raw)
  if type(raw) ~= "table" or type(value(raw.file)) ~= "string" then
    return nil
  end
  return { file = raw.file, line = value(raw.line) or 1, ["function"] = value(raw["function"]) }
end

-- "LlamaRMSNorm.forward" (the library function, qualified by the module's class when it is that
-- module's forward), and " in LlamaRMSNorm.forward of model.layers.{0..3}.input_layernorm".
local function describe(library, module_class, modules)
  local cls = short_class(module_class)
  local fn = library and library["function"]
  if fn == "forward" and cls then
    fn = cls .. ".forward"
  end
  local parts = {}
  if fn then
    table.insert(parts, "in " .. fn)
  end
  if modules then
    table.insert(parts, (fn and "of " or "in ") .. modules)
  elseif cls and not fn then
    table.insert(parts, "in " .. cls)
  end
  return fn, table.concat(parts, " ")
end

-- The method's refused ops by cause and user line, most costly first: each refusal group of the
-- report (in its order) at each user line its ops come from, then the ops no group names, as
-- they come. Each: {op, reason, count, file, line, library, function_name, where}.
function M.causes(method)
  local ops = value(method.not_delegated) or {}
  local groups = value(method.refusals) or {}
  local by_node = {}
  for _, op in ipairs(ops) do
    if value(op.node) then
      by_node[op.node] = op
    end
  end
  local causes, claimed = {}, {}
  local function add(op, reason, count, file, line, library, module_class, modules)
    local fn, where = describe(library, module_class, modules)
    table.insert(causes, { op = op, reason = reason, count = count, file = file, line = line,
      library = library, function_name = fn, where = where })
  end
  for _, group in ipairs(groups) do
    local lines, order = {}, {}
    for _, node in ipairs(value(group.nodes) or {}) do
      local op = by_node[node]
      if op and not claimed[node] then
        claimed[node] = true
        local key = tostring(value(op.file)) .. ":" .. tostring(value(op.line))
        if not lines[key] then
          lines[key] = { file = value(op.file), line = value(op.line), count = 0 }
          table.insert(order, key)
        end
        lines[key].count = lines[key].count + 1
      end
    end
    if #order == 0 then -- a group whose ops the report does not list: at its own line
      lines.own = { file = value(group.file), line = value(group.line), count = value(group.count) or 0 }
      order = { "own" }
    end
    for _, key in ipairs(order) do
      local at = lines[key]
      add(group.op, group.reason, at.count, at.file, at.line, frame(group.library),
        value(group.module_class), value(group.modules))
    end
  end
  for _, op in ipairs(ops) do
    if not (value(op.node) and claimed[op.node]) then
      add(op.op, op.reason, 1, value(op.file), value(op.line), frame(op.library),
        value(op.module_class), value(op.module_path))
    end
  end
  return causes
end

-- The report's per-module coverage as text lines, per target and method: each module under its
-- listed parents, with its class, delegated ops and the server's percent of the row.
function M.module_lines(result)
  local lines = {}
  for _, target in ipairs(targets(result)) do
    local sizes = M.sizes_line(target)
    if sizes then
      table.insert(lines, target.name .. " · " .. sizes)
    end
    for _, name in ipairs(sorted_keys(target.methods)) do
      local method = target.methods[name]
      table.insert(lines, target.name .. " · " .. M.method_line(name, method))
      local generation = M.edge_generation_line(name, method)
      if generation then
        table.insert(lines, target.name .. " · " .. generation)
      end
      local modules = value(method.modules) or {}
      local listed = {}
      for _, module in ipairs(modules) do
        listed[module.path] = true
      end
      local width, counts_width = 0, 0
      local rows = {}
      for _, module in ipairs(modules) do
        local path = value(module.path) or ""
        local depth = 0
        if path ~= "" then
          depth = listed[""] and 1 or 0
          local prefix = nil
          for part in path:gmatch("[^.]+") do
            if prefix and listed[prefix] then
              depth = depth + 1
            end
            prefix = prefix and (prefix .. "." .. part) or part
          end
        end
        local label = string.rep("  ", depth + 1) .. (path == "" and "(model)" or path)
        local ops, delegated = value(module.ops) or 0, value(module.ops_delegated) or 0
        local counts = string.format("%d of %d", delegated, ops)
        width = math.max(width, vim.fn.strdisplaywidth(label))
        counts_width = math.max(counts_width, #counts)
        local instances = value(module.instances) or 1
        local class = (short_class(module.module_class) or "")
          .. (instances > 1 and (" ×" .. instances) or "")
        -- The server's percent of the row, as sent; blank from an older server that sends none.
        local percent = value(module.percent)
        table.insert(rows, { label = label, class = class, counts = counts,
          percent = type(percent) == "number" and string.format("%3d %%", percent) or "     " })
      end
      for _, row in ipairs(rows) do
        local pad = string.rep(" ", width - vim.fn.strdisplaywidth(row.label) + 2)
          .. string.rep(" ", counts_width - #row.counts)
        table.insert(lines, string.format("%s%s%s  %s  %s", row.label, pad, row.counts,
          row.percent, row.class))
      end
      if #modules == 0 then
        table.insert(lines, "  (no per-module coverage in this report)")
      end
      table.insert(lines, "")
    end
  end
  if #lines == 0 then
    table.insert(lines, "lowerd: no targets built")
  end
  return lines
end

-- Location-list items of the relatedInformation of lowerd's diagnostics (vim.diagnostic.get's
-- items): the library lines that made a line's refused ops.
function M.related_items(diagnostics)
  local items = {}
  for _, diagnostic in ipairs(diagnostics) do
    local lsp = diagnostic.user_data and diagnostic.user_data.lsp or {}
    if diagnostic.source == "lowerd" then
      for _, info in ipairs(value(lsp.relatedInformation) or {}) do
        local location = info.location or {}
        local start = (location.range or {}).start or {}
        table.insert(items, {
          filename = vim.uri_to_fname(location.uri),
          lnum = (start.line or 0) + 1,
          col = (start.character or 0) + 1,
          text = info.message,
          type = "I",
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
        table.insert(chunks, { target.name .. " · " .. M.method_line(method, target.methods[method])
          .. "\n", "Normal" })
      end
      local sizes = M.sizes_line(target)
      if sizes then
        table.insert(chunks, { target.name .. " · " .. sizes .. "\n", "Comment" })
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

-- The coverage the server sent ({percent, backends}) of the built target with the lowest, the
-- first of equals; nil when none has one (not built, failed, or an older server).
function M.lowest_coverage(shown)
  local lowest = nil
  for _, target in ipairs(shown) do
    local coverage = value(target.coverage)
    if target.status == "ok" and type(coverage) == "table"
        and type(value(coverage.percent)) == "number"
        and (lowest == nil or coverage.percent < lowest.percent) then
      lowest = coverage
    end
  end
  return lowest
end

-- The lowest coverage among the targets touching `file` (all targets if none does), as the
-- server computed it: "XNNPACK 85 %", "CPU only 0 %"; "lowerd: net failed"; "lowerd" when the
-- server sent no coverage.
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
  local failed = {}
  for _, target in ipairs(shown) do
    if target.status == "error" then
      table.insert(failed, target.name)
    end
  end
  if #failed > 0 then
    return "lowerd: " .. table.concat(failed, ", ") .. " failed"
  end
  local coverage = M.lowest_coverage(shown)
  if not coverage then
    return "lowerd"
  end
  local backends = value(coverage.backends) or {}
  local where = #backends > 0 and table.concat(backends, "+") or "CPU only"
  return string.format("%s %d %%", where, coverage.percent)
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

-- The lines of a lowerd.explain answer (the `lowerd explain` text of each target), or the
-- error it gives.
function M.explain_lines(result)
  if type(result) ~= "table" then
    return { "lowerd: lowerd.explain gave no answer" }
  end
  if type(result.error) == "string" and result.error ~= "" then
    return { "lowerd: " .. result.error }
  end
  local lines = {}
  for _, target in ipairs(result.targets or {}) do
    for _, line in ipairs(target.lines or {}) do
      table.insert(lines, line)
    end
  end
  return #lines > 0 and lines or { "lowerd: nothing to explain" }
end

-- The quickfix item of a report's list at file:line (the op a code action is about), if any.
function M.item_at(items, filename, lnum)
  for index, item in ipairs(items) do
    if item.filename == filename and item.lnum == lnum then
      return index
    end
  end
  return nil
end

return M
