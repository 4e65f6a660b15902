// ---- the front door: what other capabilities and the Runtime use of Models (scripts/layers.ts) ----
export { answersAtOnce, StepEngine } from "./Models/StepEngine.js"
