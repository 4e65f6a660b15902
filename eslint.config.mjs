// ESLint (flat config): TypeScript's recommended rules and the dprint formatter as Effect's own
// repositories configure it (`@effect/dprint`, which also sorts import declarations and named
// imports), so `npm run lint` both lints and checks formatting, and `npm run format` fixes both.
import * as effectEslint from "@effect/eslint-plugin"
import tseslint from "typescript-eslint"

export default tseslint.config(
  { ignores: ["**/node_modules", "**/dist", "**/.data", "**/*.md"] },
  ...tseslint.configs.recommended,
  ...effectEslint.configs.dprint,
  {
    files: ["**/*.ts", "**/*.mjs"],
    rules: {
      "object-shorthand": "error",
      "prefer-const": ["error", { ignoreReadBeforeAssign: true }],
      "no-fallthrough": "off",
      "@typescript-eslint/array-type": ["error", { default: "generic", readonly: "generic" }],
      "@typescript-eslint/consistent-type-imports": ["error", { fixStyle: "inline-type-imports" }],
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/no-namespace": "off",
      "@typescript-eslint/no-empty-object-type": "off",
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 140,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }]
    }
  }
)
