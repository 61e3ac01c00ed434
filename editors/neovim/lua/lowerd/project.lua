-- lowerd projects: the nearest folder up from a file whose pyproject.toml has [tool.lowerd].
-- Plain Lua and vim.loop, so it runs on Neovim 0.7 (no vim.fs).

local M = {}

local function read(path)
  local file = io.open(path, "r")
  if not file then
    return nil
  end
  local text = file:read("*a")
  file:close()
  return text
end

-- Does a pyproject.toml's text have a [tool.lowerd] table (or one of its sub-tables)?
function M.has_lowerd_config(text)
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    if line:match("^%s*%[%s*tool%s*%.%s*lowerd%s*[%.%]]") then
      return true
    end
  end
  return false
end

local function parent(dir)
  local up = dir:match("^(.*)/[^/]*$")
  if up == nil or up == dir then
    return nil
  end
  return up == "" and "/" or up
end

-- The project root of `file` (an absolute path), or nil.
function M.find_root(file)
  local dir = vim.fn.fnamemodify(file, ":p:h")
  while dir do
    local text = read(dir .. "/pyproject.toml")
    if text and M.has_lowerd_config(text) then
      return dir
    end
    if dir == "/" then
      return nil
    end
    dir = parent(dir)
  end
  return nil
end

-- The names of the [tool.lowerd.targets.<name>] tables in the root's pyproject.toml.
function M.target_names(root)
  local names = {}
  local text = read(root .. "/pyproject.toml") or ""
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    local name = line:match('^%s*%[%s*tool%.lowerd%.targets%.([%w_%-]+)%s*%]')
      or line:match('^%s*%[%s*tool%.lowerd%.targets%."([^"]+)"%s*%]')
    if name then
      table.insert(names, name)
    end
  end
  return names
end

return M
