-- lowerd for Neovim: runs `python -m lowerd serve` for Python buffers of projects whose
-- pyproject.toml has a [tool.lowerd] table. Works on Neovim 0.7 (vim.lsp.start_client +
-- buf_attach_client) and later (vim.lsp.start).
--
--   require("lowerd").setup({ python = ".venv/bin/python" })

local project = require("lowerd.project")
local report = require("lowerd.report")
local compare = require("lowerd.compare")

local M = {}

local defaults = {
  -- Python that runs the server; nil: $VIRTUAL_ENV's, else "python3".
  python = nil,
  -- The whole server command, instead of { python, "-m", "lowerd", "serve" }.
  cmd = nil,
  -- Sent as initializationOptions and workspace/didChangeConfiguration (section "lowerd").
  settings = {
    notDelegatedSeverity = "warning", -- "warning" | "information" | "hint"
    inlayHints = true, -- `→ XNNPACK #2` / `→ CPU` at line ends (shown on Neovim 0.10+)
    -- workerTimeout = 600,        -- seconds per target build
    -- workerMemoryLimit = 4096,   -- MB per build worker
    -- workers = 2,                -- targets built at once
  },
  filetypes = { "python", "toml" },
  -- Refresh the server's code lenses (coverage + "Build .pte") in attached buffers.
  codelens = true,
  on_attach = nil,
  capabilities = nil,
}

M.config = vim.deepcopy(defaults)

-- Clients by project root, for Neovim 0.7 where vim.lsp.start does not exist.
local clients_by_root = {}
-- The last report per project root and the builds in progress, for status().
local state = { reports = {}, progress = {} }

local function python()
  if M.config.python then
    return M.config.python
  end
  local venv = vim.env.VIRTUAL_ENV
  if venv and venv ~= "" then
    return venv .. "/bin/python"
  end
  return "python3"
end

local function command()
  return M.config.cmd or { python(), "-m", "lowerd", "serve" }
end

local function notify(message, level)
  vim.schedule(function()
    vim.notify("lowerd: " .. message, level or vim.log.levels.INFO)
  end)
end

-- Clients ----------------------------------------------------------------------------------------

-- Client methods are called with `:` from Neovim 0.11 on, with `.` before.
local colon_methods = vim.fn.has("nvim-0.11") == 1

local function call(client, method, ...)
  if colon_methods then
    return client[method](client, ...)
  end
  return client[method](...)
end

local function is_running(client)
  return client ~= nil and not call(client, "is_stopped")
end

local function lowerd_clients(bufnr)
  local found = {}
  local all
  if vim.lsp.get_clients then -- 0.10+
    all = vim.lsp.get_clients(bufnr and { bufnr = bufnr } or nil)
  elseif bufnr then
    all = vim.lsp.buf_get_clients(bufnr)
  else
    all = vim.lsp.get_active_clients()
  end
  for _, client in pairs(all) do
    if client.name == "lowerd" then
      table.insert(found, client)
    end
  end
  return found
end

-- The buffer's lowerd client, else any running one.
local function client_for_buffer(bufnr)
  local attached = lowerd_clients(bufnr == 0 and vim.api.nvim_get_current_buf() or bufnr)[1]
  if attached then
    return attached
  end
  for _, client in ipairs(lowerd_clients(nil)) do
    if is_running(client) then
      return client
    end
  end
  return nil
end

-- Requests -------------------------------------------------------------------------------------

local function execute(client, name, arguments, on_result)
  call(client, "request", "workspace/executeCommand",
    { command = name, arguments = arguments or {} },
    function(err, result)
      if err then
        notify(name .. " failed: " .. (err.message or vim.inspect(err)), vim.log.levels.ERROR)
      elseif on_result then
        on_result(result)
      end
    end)
end

local function refresh_report(client)
  execute(client, "lowerd.report", {}, function(result)
    state.reports[client.config.root_dir] = result
  end)
end

-- Handlers -------------------------------------------------------------------------------------

local function progress_handler(err, result, ctx, config)
  local value = result and result.value
  if type(value) == "table" and type(result.token) == "string"
      and result.token:match("^lowerd%-") then
    if value.kind == "end" then
      state.progress[result.token] = nil
    else
      local current = state.progress[result.token] or {}
      current.title = value.title or current.title
      current.message = value.message or current.message
      current.percentage = value.percentage or current.percentage
      state.progress[result.token] = current
    end
  end
  local default = vim.lsp.handlers["$/progress"]
  if default then
    return default(err, result, ctx, config)
  end
end

local function build_finished_handler(_, _, ctx)
  local client = vim.lsp.get_client_by_id(ctx.client_id)
  if client then
    refresh_report(client)
  end
end

-- Starting -------------------------------------------------------------------------------------

local function on_attach(client, bufnr)
  if M.config.codelens and vim.lsp.codelens then
    local group = vim.api.nvim_create_augroup("lowerd_codelens_" .. bufnr, { clear = true })
    vim.api.nvim_create_autocmd({ "BufEnter", "BufWritePost", "CursorHold" }, {
      group = group,
      buffer = bufnr,
      callback = function()
        pcall(vim.lsp.codelens.refresh)
      end,
    })
    pcall(vim.lsp.codelens.refresh)
  end
  -- Inlay hints exist from Neovim 0.10 (vim.lsp.inlay_hint.enable); 0.7 shows the diagnostics.
  if M.config.settings.inlayHints ~= false and vim.lsp.inlay_hint and vim.lsp.inlay_hint.enable then
    pcall(vim.lsp.inlay_hint.enable, true, { bufnr = bufnr })
  end
  if M.config.on_attach then
    M.config.on_attach(client, bufnr)
  end
end

local function client_config(root)
  return {
    name = "lowerd",
    cmd = command(),
    cmd_cwd = root,
    root_dir = root,
    workspace_folders = { { uri = vim.uri_from_fname(root), name = root } },
    init_options = M.config.settings,
    settings = { lowerd = M.config.settings },
    capabilities = M.config.capabilities,
    handlers = {
      ["$/progress"] = progress_handler,
      ["lowerd/buildFinished"] = build_finished_handler,
      ["lowerd/buildStarted"] = function() end,
    },
    -- Code lenses run these here instead of sending them: the coverage lens ("lowerd.report")
    -- fills the quickfix list, "Build .pte" builds and says how it went.
    commands = {
      ["lowerd.report"] = function()
        M.report()
      end,
      ["lowerd.build"] = function(lens_command)
        M.build((lens_command.arguments or {})[1])
      end,
    },
    on_attach = on_attach,
    on_exit = function()
      clients_by_root[root] = nil
    end,
  }
end

-- Attaches lowerd to a buffer if its file is in a lowerd project. Returns the client id or nil.
function M.attach(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  local file = vim.api.nvim_buf_get_name(bufnr)
  if file == "" or vim.bo[bufnr].buftype ~= "" then
    return nil
  end
  local root = project.find_root(file)
  if not root then
    return nil
  end
  if vim.lsp.start then
    local id
    vim.api.nvim_buf_call(bufnr, function()
      id = vim.lsp.start(client_config(root))
    end)
    return id
  end
  local id = clients_by_root[root]
  if not is_running(id and vim.lsp.get_client_by_id(id)) then
    id = vim.lsp.start_client(client_config(root))
    if not id then
      notify("could not start " .. table.concat(command(), " "), vim.log.levels.ERROR)
      return nil
    end
    clients_by_root[root] = id
  end
  vim.lsp.buf_attach_client(bufnr, id)
  return id
end

-- Commands -------------------------------------------------------------------------------------

local function with_client(callback)
  local client = client_for_buffer(0)
  if not client then
    notify("no lowerd server for this buffer", vim.log.levels.WARN)
    return
  end
  callback(client)
end

function M.build(target)
  with_client(function(client)
    local arguments = target and target ~= "" and { target } or nil
    local name = arguments and "lowerd.build" or "lowerd.buildAll"
    notify("building " .. (target or "all targets"))
    execute(client, name, arguments, function(result)
      state.reports[client.config.root_dir] = nil
      refresh_report(client)
      notify(report.build_summary(result))
    end)
  end)
end

function M.build_all()
  M.build(nil)
end

-- Fills the quickfix list with the ops left on the CPU and the failed targets, and echoes a
-- summary line per target and method.
function M.report()
  with_client(function(client)
    execute(client, "lowerd.report", {}, function(result)
      local root = client.config.root_dir
      state.reports[root] = result
      vim.fn.setqflist({}, " ", { title = "lowerd report", items = report.quickfix(result, root) })
      vim.schedule(function()
        vim.api.nvim_echo(report.summary_chunks(result), true, {})
        vim.cmd("copen")
      end)
    end)
  end)
end

-- Opens (or refreshes) the scratch buffer `name` with lines, in a split at the bottom.
local function show_scratch(name, lines)
  vim.schedule(function()
    local bufnr = vim.fn.bufnr(name)
    if bufnr == -1 then
      bufnr = vim.api.nvim_create_buf(false, true)
      vim.api.nvim_buf_set_name(bufnr, name)
      vim.bo[bufnr].bufhidden = "hide"
    end
    vim.bo[bufnr].modifiable = true
    vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
    vim.bo[bufnr].modifiable = false
    local window = vim.fn.bufwinid(bufnr)
    if window == -1 then
      vim.cmd("botright split")
      vim.api.nvim_win_set_buf(0, bufnr)
    else
      vim.api.nvim_set_current_win(window)
    end
  end)
end
M.show_scratch = show_scratch

-- Opens (or refreshes) a scratch buffer with the coverage per module of each target and method.
function M.modules()
  with_client(function(client)
    execute(client, "lowerd.report", {}, function(result)
      state.reports[client.config.root_dir] = result
      show_scratch("lowerd://modules", report.module_lines(result))
    end)
  end)
end

-- Why the last build of the target did what it did (`lowerd explain`), in a scratch buffer.
function M.explain(target)
  with_client(function(client)
    execute(client, "lowerd.explain", target and { target } or {}, function(result)
      show_scratch("lowerd://explain", report.explain_lines(result))
    end)
  end)
end

-- The target lowered with each backend alone (`lowerd compare`), side by side in a scratch buffer.
function M.compare(target)
  with_client(function(client)
    notify("comparing backends for " .. target)
    execute(client, "lowerd.compare", { target }, function(result)
      show_scratch("lowerd://compare", compare.lines(result))
    end)
  end)
end

-- The stock ExecuTorch script that reproduces the target, in the + and " registers.
function M.copy_stock_script(target)
  with_client(function(client)
    execute(client, "lowerd.stockScript", { target }, function(result)
      if type(result) ~= "table" or type(result.script) ~= "string" then
        notify((type(result) == "table" and result.error) or "no script", vim.log.levels.ERROR)
        return
      end
      vim.schedule(function()
        pcall(vim.fn.setreg, "+", result.script)
        vim.fn.setreg('"', result.script)
        notify("copied a stock ExecuTorch script for " .. target
          .. "; run it with the project's Python: it writes " .. target .. ".pte with lowerd's sha256")
      end)
    end)
  end)
end

-- The report's quickfix list, at the op made at file:line (what a code action is about).
function M.show_in_report(target, uri, line)
  with_client(function(client)
    execute(client, "lowerd.report", {}, function(result)
      local root = client.config.root_dir
      state.reports[root] = result
      local items = report.quickfix(result, root)
      vim.fn.setqflist({}, " ", { title = "lowerd report: " .. target, items = items })
      local index = report.item_at(items, vim.uri_to_fname(uri), line)
      vim.schedule(function()
        vim.cmd("copen")
        if index then
          vim.cmd("cc " .. index)
        end
      end)
    end)
  end)
end

-- The commands behind the server's code actions (daemon/editor_view.py code_actions).
local CODE_ACTION_COMMANDS = {
  ["lowerd.showInReport"] = function(arguments)
    M.show_in_report(arguments[1], arguments[2], arguments[3])
  end,
  ["lowerd.explainRebuild"] = function(arguments)
    M.explain(arguments[1])
  end,
  ["lowerd.copyStockScript"] = function(arguments)
    M.copy_stock_script(arguments[1])
  end,
  ["lowerd.compareBackends"] = function(arguments)
    M.compare(arguments[1])
  end,
}

-- The library lines that made the refused ops of the cursor's line (the relatedInformation of
-- lowerd's diagnostics there) in the location list; jumps to the first. Returns the items.
function M.related()
  local bufnr = vim.api.nvim_get_current_buf()
  local line = vim.api.nvim_win_get_cursor(0)[1] - 1
  local items = report.related_items(vim.diagnostic.get(bufnr, { lnum = line }))
  if #items == 0 then
    notify("no library lines for this line", vim.log.levels.INFO)
    return items
  end
  vim.fn.setloclist(0, {}, " ", { title = "lowerd: made in", items = items })
  vim.cmd("lfirst")
  return items
end

function M.restart()
  for _, client in ipairs(lowerd_clients(nil)) do
    call(client, "stop")
  end
  clients_by_root = {}
  state = { reports = {}, progress = {} }
  vim.defer_fn(function()
    for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
      if vim.api.nvim_buf_is_loaded(bufnr)
          and vim.tbl_contains(M.config.filetypes, vim.bo[bufnr].filetype) then
        M.attach(bufnr)
      end
    end
  end, 500)
end

-- A short text for a statusline: "lowerd: building net", "XNNPACK 85 %", "lowerd: net failed".
function M.status(bufnr)
  for _, activity in pairs(state.progress) do
    local title = (activity.title or "lowerd: building"):gsub("^lowerd: ", "")
    return "lowerd: building " .. title
  end
  local client = client_for_buffer(bufnr or 0)
  local root = client and client.config.root_dir
  local result = root and state.reports[root]
  if not result then
    return client and "lowerd" or ""
  end
  local file = vim.api.nvim_buf_get_name(bufnr or 0)
  return report.status_text(result, root, file)
end

local function complete_targets()
  local client = client_for_buffer(0)
  local result = client and state.reports[client.config.root_dir]
  local names = {}
  for _, target in ipairs(result and result.targets or {}) do
    table.insert(names, target.name)
  end
  if #names == 0 and client then
    names = project.target_names(client.config.root_dir)
  end
  return names
end

function M.setup(options)
  M.config = vim.tbl_deep_extend("force", vim.deepcopy(defaults), options or {})
  local group = vim.api.nvim_create_augroup("lowerd", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = M.config.filetypes,
    callback = function(args)
      M.attach(args.buf)
    end,
  })
  vim.api.nvim_create_user_command("LowerdBuild", function(args)
    M.build(args.args ~= "" and args.args or nil)
  end, { nargs = "?", complete = complete_targets, desc = "lowerd: build a target (all without one)" })
  vim.api.nvim_create_user_command("LowerdBuildAll", M.build_all, { desc = "lowerd: build every target" })
  vim.api.nvim_create_user_command("LowerdReport", M.report, { desc = "lowerd: delegation report" })
  vim.api.nvim_create_user_command("LowerdModules", M.modules,
    { desc = "lowerd: coverage per module" })
  vim.api.nvim_create_user_command("LowerdRelated", M.related,
    { desc = "lowerd: the library lines that made this line's refused ops" })
  vim.api.nvim_create_user_command("LowerdRestart", M.restart, { desc = "lowerd: restart the server" })
  vim.api.nvim_create_user_command("LowerdExplain", function(args)
    M.explain(args.args ~= "" and args.args or nil)
  end, { nargs = "?", complete = complete_targets, desc = "lowerd: why the last build did what it did" })
  vim.api.nvim_create_user_command("LowerdCompare", function(args)
    if args.args ~= "" then
      return M.compare(args.args)
    end
    vim.ui.select(complete_targets(), { prompt = "Target to compare" }, function(choice)
      if choice then
        M.compare(choice)
      end
    end)
  end, { nargs = "?", complete = complete_targets, desc = "lowerd: each backend side by side" })
  vim.api.nvim_create_user_command("LowerdStockScript", function(args)
    M.copy_stock_script(args.args)
  end, { nargs = 1, complete = complete_targets, desc = "lowerd: copy a stock ExecuTorch script" })
  for name, run in pairs(CODE_ACTION_COMMANDS) do
    vim.lsp.commands[name] = function(command)
      run(command.arguments or {})
    end
  end
  -- Buffers opened before setup() (e.g. `nvim model.py` with setup in a later plugin file).
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr)
        and vim.tbl_contains(M.config.filetypes, vim.bo[bufnr].filetype) then
      M.attach(bufnr)
    end
  end
end

return M
