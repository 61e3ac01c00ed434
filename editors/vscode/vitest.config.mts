import { defineConfig } from "vitest/config";

// Unit tests cover the modules that do not import "vscode"; VS Code cannot run here.
export default defineConfig({
  test: { include: ["test/**/*.test.ts"], environment: "node" },
});
