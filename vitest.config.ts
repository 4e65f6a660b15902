import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    globalSetup: ["test/support/globalSetup.ts"],
    // Files share a worker's module cache (each worker imports the service once, not once per
    // file: a third of the suite's time); test/support/setupFile.ts undoes what a file leaves in
    // shared modules.
    isolate: false,
    setupFiles: ["test/support/setupFile.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    maxWorkers: 2,
    minWorkers: 1
  }
})
