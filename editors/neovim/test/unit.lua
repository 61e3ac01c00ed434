-- Unit tests of the plugin's pure parts (lowerd.report, lowerd.project), run by
-- tests/test_neovim.py as
--   nvim --headless -u NONE -i NONE -n -c "luafile editors/neovim/test/unit.lua"
-- with LOWERD_NVIM_RTP=editors/neovim and LOWERD_NVIM_TMP=<an empty folder>. Prints one line
-- per test and exits 0 when all pass, 1 otherwise.

vim.opt.runtimepath:prepend(vim.env.LOWERD_NVIM_RTP)
local report = require("lowerd.report")
local project = require("lowerd.project")
local compare = require("lowerd.compare")

local failures, passed = {}, 0

local function test(name, body)
  local ok, err = pcall(body)
  if ok then
    passed = passed + 1
    io.stdout:write("PASS " .. name .. "\n")
  else
    table.insert(failures, name)
    io.stdout:write("FAIL " .. name .. ": " .. tostring(err) .. "\n")
  end
end

local function equal(actual, expected)
  if not vim.deep_equal(actual, expected) then
    error(string.format("expected %s, got %s", vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

-- The server's answers as tests/editor_fixtures.py writes them from lowerd's classes
-- (test/fixtures), decoded as the client decodes them (JSON null as vim.NIL).
local function fixture(name)
  local here = debug.getinfo(1, "S").source:sub(2):match("(.*/)") or "./"
  local file = assert(io.open(here .. "fixtures/" .. name, "r"))
  local text = file:read("*a")
  file:close()
  return vim.json.decode(text)
end

-- A lowerd.report answer: net built (two ops left on the CPU), broken failed, later not built.
local RESULT = fixture("report.json")

test("method_line puts the name before the server's sentence and hint, computing nothing", function()
  equal(report.method_line("forward", RESULT.targets[1].methods.forward),
    "forward: 2 of 4 ops on XNNPACK in 2 partitions (50 %)")
  equal(report.method_line("f", { ops = 271, ops_delegated = 270, summary = "as the server says",
    fixes_hint = "3 fixes would make this 1 partition" }),
    "f: as the server says; 3 fixes would make this 1 partition")
  -- An older server: no sentence, no hint, nothing made up from the counts.
  equal(report.method_line("g", { ops = 3, ops_delegated = 0, backends = {} }), "g")
end)

test("edge_generation_line says which way edge generation ran, in the server's words", function()
  local method = { summary = "2 of 2 ops on XNNPACK in 1 partition (100 %)",
    edge_generation = { path = "stock", regions = 0, templates = 0, reason = "2 methods",
      words = "stock (2 methods)" } }
  equal(report.edge_generation_line("encode", method), "encode: edge generation: stock (2 methods)")
  local lines = report.module_lines({ targets = { { name = "t", status = "ok",
    methods = { encode = method } } } })
  equal(lines[2], "t · encode: edge generation: stock (2 methods)")
  -- A kept .pte or an older server: no line.
  equal(report.edge_generation_line("forward", RESULT.targets[1].methods.forward), nil)
  equal(report.edge_generation_line("forward", { edge_generation = vim.NIL }), nil)
end)

test("quickfix lists failed targets and ops left on the CPU at their lines", function()
  local items = report.quickfix(RESULT, "/p")
  equal(#items, 3)
  equal(items[1], { filename = "/p/models/net.py", lnum = 17, type = "W",
    text = "net.forward: aten.pow.Tensor_Scalar not delegated: only support power == 2, got 3" })
  equal(items[2].filename, nil) -- an op without a line of the user's
  equal(items[2].lnum, 1)
  equal(items[3], { filename = "/p/models/broken.py", lnum = 5, type = "E",
    text = "broken: export-error: boom" })
end)

test("quickfix shows a config error at its line", function()
  local items = report.quickfix({ error = { message = "unknown key", file = "pyproject.toml", line = 3 },
    targets = {} }, "/p")
  equal(items, { { filename = "/p/pyproject.toml", lnum = 3, type = "E",
    text = "config-error: unknown key" } })
end)

test("status_text: coverage of the targets touching the file, red words on failure", function()
  equal(report.status_text(RESULT, "/p", "/p/models/net.py"), "XNNPACK 50 %")
  equal(report.status_text(RESULT, "/p", "/p/models/broken.py"), "lowerd: broken failed")
  equal(report.status_text(RESULT, "/p", "/elsewhere.py"), "lowerd: broken failed")
  equal(report.status_text({ error = { message = "x" }, targets = {} }, "/p", "/p/a.py"),
    "lowerd: config error")
end)

test("status_text shows the lowest coverage the server sent among the targets touching the file", function()
  local function target(name, file, coverage)
    return { name = name, status = "ok", entry = { file = file, line = 1 }, coverage = coverage,
      methods = { forward = { ops = 100, ops_delegated = 100 } } }
  end
  local result = { error = vim.NIL, targets = {
    target("big", "models/shared.py", { percent = 97, backends = { "Vulkan", "XNNPACK" } }),
    target("small", "models/shared.py", { percent = 85, backends = { "XNNPACK" } }),
    target("other", "models/other.py", { percent = 3, backends = {} }),
    target("old", "models/old.py", vim.NIL), -- an older server's: no coverage sent
  } }
  equal(report.status_text(result, "/p", "/p/models/shared.py"), "XNNPACK 85 %")
  equal(report.status_text(result, "/p", "/p/models/other.py"), "CPU only 3 %")
  equal(report.status_text(result, "/p", "/elsewhere.py"), "CPU only 3 %")
  equal(report.status_text(result, "/p", "/p/models/old.py"), "lowerd")
  equal(report.lowest_coverage({ { status = "error", coverage = { percent = 0, backends = {} } },
    { status = "ok", coverage = { percent = 5, backends = { "XNNPACK" } } } }).percent, 5)
end)

test("summary_chunks has a line per target and method", function()
  local chunks = report.summary_chunks(RESULT)
  equal(chunks[1], { "net · forward: 2 of 4 ops on XNNPACK in 2 partitions (50 %)\n", "Normal" })
  equal(chunks[2], { "broken: failed (export-error)\n", "ErrorMsg" })
  equal(chunks[3], { "later: not built yet\n", "Comment" })
end)

test("sizes_line says what the .pte costs as the CLI does", function()
  equal({ report.format_size(0), report.format_size(1023), report.format_size(1536),
    report.format_size(1048575), report.format_size(5 * 1024 ^ 3) },
    { "0 B", "1023 B", "1.5 KiB", "1 MiB", "5 GiB" })
  local target = { name = "net", status = "ok", methods = { forward = { summary = "4 of 4 ops" } } }
  equal(report.sizes_line(target), nil) -- an older server's report has no sizes
  target.sizes = { pte_bytes = 4256, constant_bytes = 0, delegate_blob_bytes = 1440,
    delegate_data_bytes = 576 }
  target.methods.forward.planned_memory_bytes = 192
  local line = ".pte 4.2 KiB (constants 0 B, delegate blobs 1.4 KiB, delegate weights 576 B); "
    .. "forward: planned memory 192 B"
  equal(report.sizes_line(target), line)
  local result = { targets = { target } }
  equal(report.summary_chunks(result)[2], { "net · " .. line .. "\n", "Comment" })
  equal(report.module_lines(result)[1], "net · " .. line)
end)

test("build_summary says how each target went", function()
  equal(report.build_summary(RESULT), "net ok (4.9 s), broken failed (export-error), later not built")
  equal(report.build_summary({ error = "unknown targets: x", targets = {} }), "unknown targets: x")
end)

-- Issue 11's fields: four layers' RMSNorm made a mean and an add in a library, each grouped.
local LIB = "/venv/site-packages/transformers/modeling_llama.py"
local function norm_op(op, layer, line)
  return { op = op, file = "models/llama.py", line = 12, reason = op .. " refused", node = op .. layer,
    library = { file = LIB, line = line, ["function"] = "forward" },
    module_path = "model.layers." .. layer .. ".input_layernorm",
    module_class = "transformers.LlamaRMSNorm", elements = 64 }
end
local function norm_group(op, line, boundaries)
  return { op = op, reason = op .. " refused", count = 4, file = "models/llama.py", line = 12,
    library = { file = LIB, line = line, ["function"] = "forward" },
    nodes = { op .. 0, op .. 1, op .. 2, op .. 3 },
    modules = "model.layers.{0..3}.input_layernorm", module_class = "LlamaRMSNorm",
    boundaries = boundaries, elements = 256 }
end
local LLAMA = {
  ops = 40, ops_delegated = 32, coverage_percent = 80,
  summary = "32 of 40 ops on XNNPACK in 5 partitions (80 %)",
  fixes_hint = "1 fix would make this 1 partition",
  backends = { XNNPACK = { ops = 32, partitions = 5 } },
  not_delegated = {},
  refusals = { norm_group("aten.add.Scalar", 69, 4), norm_group("aten.mean.dim", 68, 0) },
  modules = {
    { path = "", module_class = "LlamaForCausalLM", ops = 40, ops_delegated = 32, percent = 80 },
    { path = "model", module_class = "x.LlamaModel", ops = 38, ops_delegated = 30, percent = 78 },
    { path = "model.layers.*.input_layernorm", module_class = "LlamaRMSNorm", ops = 12, ops_delegated = 4,
      instances = 4, percent = 33 },
  },
}
for layer = 0, 3 do
  table.insert(LLAMA.not_delegated, norm_op("aten.mean.dim", layer, 68))
  table.insert(LLAMA.not_delegated, norm_op("aten.add.Scalar", layer, 69))
end
-- A fifth add on another line of the user's, in the add group too.
table.insert(LLAMA.not_delegated, vim.tbl_extend("force", norm_op("aten.add.Scalar", 9, 69),
  { line = 30, module_path = "model.norm" }))
table.insert(LLAMA.refusals[1].nodes, "aten.add.Scalar9")
local LLAMA_RESULT = { targets = { { name = "llama", status = "ok", methods = { forward = LLAMA } } } }

test("quickfix lists refusal groups most costly first, per user line, with their library line", function()
  local items = report.quickfix(LLAMA_RESULT, "/p")
  equal(#items, 6)
  equal(items[1], { filename = "/p/models/llama.py", lnum = 12, type = "W",
    text = "llama.forward: aten.add.Scalar ×4 not delegated: aten.add.Scalar refused"
      .. " (in LlamaRMSNorm.forward of model.layers.{0..3}.input_layernorm)" })
  equal(items[2], { filename = LIB, lnum = 69, type = "I",
    text = "llama.forward: aten.add.Scalar ×4 made here, in LlamaRMSNorm.forward" })
  equal({ items[3].lnum, items[3].text:match("×%d") }, { 30, nil })
  equal(items[5].text:match("^llama.forward: aten.mean.dim ×4"), "llama.forward: aten.mean.dim ×4")
  equal({ items[6].filename, items[6].lnum }, { LIB, 68 })
end)

test("summary_chunks and module_lines say what fixing would do and coverage per module", function()
  equal(report.summary_chunks(LLAMA_RESULT)[1][1],
    "llama · forward: 32 of 40 ops on XNNPACK in 5 partitions (80 %); 1 fix would make this 1 partition\n")
  equal(report.module_lines(LLAMA_RESULT), {
    "llama · forward: 32 of 40 ops on XNNPACK in 5 partitions (80 %); 1 fix would make this 1 partition",
    "  (model)                             32 of 40   80 %  LlamaForCausalLM",
    "    model                             30 of 38   78 %  LlamaModel",
    "      model.layers.*.input_layernorm   4 of 12   33 %  LlamaRMSNorm ×4",
    "",
  })
  equal(report.module_lines(RESULT)[2], "  (no per-module coverage in this report)")
end)

test("module_lines show each row's percent as the server sent it, computing none", function()
  local function rows(modules)
    local method = vim.tbl_extend("force", LLAMA, { modules = modules })
    return report.module_lines({ targets = { { name = "t", status = "ok", methods = { forward = method } } } })
  end
  -- 270 of 271: the server's 99, never 100 % unless every op is delegated.
  equal(rows({ { path = "", module_class = "Net", ops = 271, ops_delegated = 270, percent = 99 } })[2],
    "  (model)  270 of 271   99 %  Net")
  -- The server's number, not one made here from the counts.
  equal(rows({ { path = "", ops = 4, ops_delegated = 3, percent = 42 } })[2], "  (model)  3 of 4   42 %  ")
  -- An older server's row has no percent: its counts, the percent left blank.
  equal(rows({ { path = "", module_class = "Net", ops = 4, ops_delegated = 3 } })[2],
    "  (model)  3 of 4         Net")
end)

test("related_items turns lowerd's relatedInformation into location-list items", function()
  local uri = vim.uri_from_fname(LIB)
  local diagnostics = {
    { source = "lowerd", user_data = { lsp = { relatedInformation = {
      { location = { uri = uri, range = { start = { line = 68, character = 8 } } },
        message = "aten.add.Scalar ×4 in LlamaRMSNorm.forward" },
    } } } },
    { source = "pyright", user_data = { lsp = { relatedInformation = {
      { location = { uri = uri, range = { start = { line = 1, character = 0 } } }, message = "x" },
    } } } },
    { source = "lowerd", user_data = { lsp = { relatedInformation = vim.NIL } } },
  }
  equal(report.related_items(diagnostics), { { filename = LIB, lnum = 69, col = 9, type = "I",
    text = "aten.add.Scalar ×4 in LlamaRMSNorm.forward" } })
end)

test("has_lowerd_config finds [tool.lowerd] tables only", function()
  equal(project.has_lowerd_config("[project]\n\n[tool.lowerd]\nbackends = []\n"), true)
  equal(project.has_lowerd_config("[tool.lowerd.targets.a]\n"), true)
  equal(project.has_lowerd_config("[tool.lowerdx]\n"), false)
  equal(project.has_lowerd_config('description = "[tool.lowerd]"\n# [tool.lowerd]\n'), false)
end)

test("find_root walks up to the nearest lowerd project", function()
  local tmp = vim.env.LOWERD_NVIM_TMP
  vim.fn.mkdir(tmp .. "/outer/proj/models", "p")
  local function write(path, text)
    local file = assert(io.open(path, "w"))
    file:write(text)
    file:close()
  end
  write(tmp .. "/outer/pyproject.toml", "[project]\nname = 'outer'\n")
  write(tmp .. "/outer/proj/pyproject.toml",
    "[tool.lowerd]\n[tool.lowerd.targets.net]\nentry = 'm:f'\n[tool.lowerd.targets.\"b-2\"]\n")
  equal(project.find_root(tmp .. "/outer/proj/models/net.py"), tmp .. "/outer/proj")
  equal(project.find_root(tmp .. "/outer/other.py"), nil)
  equal(project.target_names(tmp .. "/outer/proj"), { "net", "b-2" })
end)

test("explain_lines: each target's printed lines, or the server's error", function()
  equal(report.explain_lines({ targets = {
    { name = "net", lines = { "net: rebuilt 1 of 2 partitions (1 from the cache)", "  models/net.py changed (line 4)" } },
  } }), { "net: rebuilt 1 of 2 partitions (1 from the cache)", "  models/net.py changed (line 4)" })
  equal(report.explain_lines({ targets = {}, error = "no lowerd project is loaded" }),
    { "lowerd: no lowerd project is loaded" })
  equal(report.explain_lines({ targets = {} }), { "lowerd: nothing to explain" })
end)

test("item_at finds the quickfix item of the op a code action is about", function()
  local items = report.quickfix(RESULT, "/p")
  local index = report.item_at(items, items[#items].filename, items[#items].lnum)
  equal(index ~= nil and items[index].lnum == items[#items].lnum, true)
  equal(report.item_at(items, "/p/elsewhere.py", 1), nil)
end)

-- A lowerd.compare answer of the refused target: XNNPACK, Vulkan up to date, CoreML unavailable.
local COMPARED = fixture("compare.json")

test("compare.lines lays the backends side by side as the CLI does, errors below", function()
  equal(compare.lines(COMPARED), {
    "refused, one backend at a time",
    "                XNNPACK                    Vulkan                  CoreML",
    "coverage        50 %                       83 %                    error",
    "ops on backend  2 of 4                     5 of 6                  error",
    "partitions      2                          2                       error",
    ".pte            4.2 KiB                    4.2 KiB                 error",
    "cache           2 hits                     up to date              error",
    "not delegated   1× aten.pow.Tensor_Scalar  1× aten.cumsum.default",
    "                1× aten.cumsum.default",
    "CoreML: backend-unavailable (pyproject.toml:9): no coremltools",
  })
  equal(compare.lines({ target = "x", backends = {}, error = "unknown target 'x'" }),
    { "lowerd: unknown target 'x'" })
  equal(compare.lines(vim.NIL), { "lowerd: lowerd.compare gave no answer" })
end)

io.stdout:write(string.format("%d passed, %d failed\n", passed, #failures))
vim.cmd(#failures == 0 and "qall!" or "cquit! 1")
