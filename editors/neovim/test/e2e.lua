-- End-to-end driver for tests/test_neovim.py, run as
--   nvim --headless -u NONE -i NONE -n -c "luafile editors/neovim/test/e2e.lua"
-- with the real `python -m lowerd serve`. Opens a model, waits for lowerd's diagnostics on the
-- refused op's line, rewrites that line, writes the file, and waits for the diagnostic to go
-- while the other refused op's stays. Writes what it saw as JSON to $LOWERD_NVIM_RESULT and quits.
--
-- Before the edit, on the line of ops a library made, :LowerdRelated's location list (the
-- diagnostic's relatedInformation) and where its first item jumps. After it, the statusline text
-- once it shows the server's coverage, and the first line of :LowerdModules' buffer (the server's
-- coverage sentence).
--
-- Environment: LOWERD_NVIM_RTP (editors/neovim), LOWERD_NVIM_PYTHON, LOWERD_NVIM_FILE (the
-- model), LOWERD_NVIM_EDIT_LINE / LOWERD_NVIM_KEEP_LINE (1-based lines of the op edited away and
-- of the op that stays), LOWERD_NVIM_RELATED_LINE (a line whose ops a library made),
-- LOWERD_NVIM_EDIT_FROM / LOWERD_NVIM_EDIT_TO (plain text replaced on the edited line),
-- LOWERD_NVIM_RESULT, LOWERD_NVIM_TIMEOUT_MS (per wait).

local env = vim.env
vim.opt.runtimepath:prepend(env.LOWERD_NVIM_RTP)
vim.cmd("filetype on")
vim.lsp.set_log_level("warn")

local timeout = tonumber(env.LOWERD_NVIM_TIMEOUT_MS or "300000")
local edit_line = tonumber(env.LOWERD_NVIM_EDIT_LINE)
local keep_line = tonumber(env.LOWERD_NVIM_KEEP_LINE)
local related_line = tonumber(env.LOWERD_NVIM_RELATED_LINE)
local started = vim.loop.hrtime()
local result = { nvim = tostring(vim.version().major .. "." .. vim.version().minor .. "."
  .. vim.version().patch), phases = {} }

local function seconds()
  return (vim.loop.hrtime() - started) / 1e9
end

local function finish(ok, message)
  result.ok = ok
  result.message = message
  result.lsp_log = vim.lsp.get_log_path()
  local file = assert(io.open(env.LOWERD_NVIM_RESULT, "w"))
  file:write(vim.fn.json_encode(result))
  file:close()
  vim.cmd("qall!")
end

-- lowerd's diagnostics in the buffer: {line (1-based), code, severity, message, related}.
local function lowerd_diagnostics(bufnr)
  local found = {}
  for _, diagnostic in ipairs(vim.diagnostic.get(bufnr)) do
    if diagnostic.source == "lowerd" then
      local lsp = diagnostic.user_data and diagnostic.user_data.lsp or {}
      table.insert(found, {
        line = diagnostic.lnum + 1,
        code = diagnostic.code or lsp.code,
        severity = diagnostic.severity,
        message = diagnostic.message,
        related = #(lsp.relatedInformation or {}),
      })
    end
  end
  table.sort(found, function(a, b)
    return a.line < b.line
  end)
  return found
end

local function not_delegated_at(bufnr, line)
  for _, diagnostic in ipairs(lowerd_diagnostics(bufnr)) do
    if diagnostic.code == "not-delegated" and diagnostic.line == line then
      return true
    end
  end
  return false
end

local function wait_for(name, predicate)
  local ok = vim.wait(timeout, predicate, 100)
  table.insert(result.phases, { name = name, ok = ok, seconds = seconds() })
  return ok
end

local function lowerd_client_count(bufnr)
  local count = 0
  local clients = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = bufnr })
    or vim.lsp.buf_get_clients(bufnr)
  for _, client in pairs(clients) do
    if client.name == "lowerd" then
      count = count + 1
    end
  end
  return count
end

local ok, err = pcall(function()
  require("lowerd").setup({ python = env.LOWERD_NVIM_PYTHON })
  vim.cmd("edit " .. vim.fn.fnameescape(env.LOWERD_NVIM_FILE))
  local bufnr = vim.api.nvim_get_current_buf()
  result.filetype = vim.bo[bufnr].filetype

  if not wait_for("attached", function()
    return lowerd_client_count(bufnr) > 0
  end) then
    return finish(false, "lowerd did not attach to the buffer")
  end

  if not wait_for("diagnostics", function()
    return not_delegated_at(bufnr, edit_line) and not_delegated_at(bufnr, keep_line)
      and not_delegated_at(bufnr, related_line)
  end) then
    result.before = lowerd_diagnostics(bufnr)
    return finish(false, "no not-delegated diagnostics on the three refused lines")
  end
  result.before = lowerd_diagnostics(bufnr)

  -- :LowerdRelated on the line of the library's ops: the location list, and the first item's
  -- file and line once it jumped there.
  local window = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_cursor(window, { related_line, 0 })
  local items = require("lowerd").related()
  table.insert(result.phases, { name = "related", ok = #items > 0, seconds = seconds() })
  result.related = {
    items = items,
    jumped_to = vim.api.nvim_buf_get_name(vim.api.nvim_get_current_buf()),
    jumped_line = vim.api.nvim_win_get_cursor(0)[1],
  }
  if #items == 0 then
    return finish(false, "no relatedInformation on the library's line")
  end
  vim.api.nvim_set_current_buf(bufnr)

  local text = vim.api.nvim_buf_get_lines(bufnr, edit_line - 1, edit_line, false)[1]
  local from, to = env.LOWERD_NVIM_EDIT_FROM, env.LOWERD_NVIM_EDIT_TO
  local first, last = text:find(from, 1, true)
  if not first then
    return finish(false, "line " .. edit_line .. " has no " .. from .. ": " .. text)
  end
  local edited = text:sub(1, first - 1) .. to .. text:sub(last + 1)
  vim.api.nvim_buf_set_lines(bufnr, edit_line - 1, edit_line, false, { edited })
  vim.cmd("write")
  result.edited_line = edited

  if not wait_for("after-write", function()
    return not not_delegated_at(bufnr, edit_line) and not_delegated_at(bufnr, keep_line)
  end) then
    result.after = lowerd_diagnostics(bufnr)
    return finish(false, "the edited op's diagnostic did not go (or the other one went too)")
  end
  result.after = lowerd_diagnostics(bufnr)

  -- The statusline once the last build's report is in: the server's coverage, as sent.
  local lowerd = require("lowerd")
  if not wait_for("coverage", function()
    result.status = lowerd.status(bufnr)
    return result.status:match("%d+ %%$") ~= nil
  end) then
    return finish(false, "the statusline shows no coverage: " .. tostring(result.status))
  end

  -- :LowerdModules: a summary line per target and method, then the module rows.
  lowerd.modules()
  if not wait_for("modules", function()
    local modules = vim.fn.bufnr("lowerd://modules")
    return modules ~= -1 and vim.api.nvim_buf_get_lines(modules, 0, 1, false)[1] ~= ""
  end) then
    return finish(false, ":LowerdModules showed nothing")
  end
  result.module_lines = vim.api.nvim_buf_get_lines(vim.fn.bufnr("lowerd://modules"), 0, -1, false)
  -- Again, from the report :LowerdModules fetched (a refresh after the build may have lagged).
  result.status = lowerd.status(bufnr)
  finish(true, "ok")
end)

if not ok then
  result.error = tostring(err)
  finish(false, "driver error: " .. tostring(err))
end
