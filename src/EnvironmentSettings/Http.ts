/** Handlers of environment settings (D16, D20): the environment's and the operator's. */
import { Effect } from "effect"

import { Api } from "../Api.js"
import { EnvironmentSettings } from "../EnvironmentSettings.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { inCell } from "../Kernel/Policy.js"

export const EnvironmentSettingsLive = HttpGroup.group(
  Api,
  "settings",
  (handlers) =>
    Effect.map(EnvironmentSettings, (settings) =>
      handlers
        .handle("getSettings", inCell((p) => settings.get(p)))
        .handle("updateSettings", inCell((p, { payload }) => settings.update(p, payload))))
)

export const OperatorSettingsLive = HttpGroup.group(
  Api,
  "operator-settings",
  (handlers) =>
    Effect.map(EnvironmentSettings, (settings) =>
      handlers
        .handle("operatorGetSettings", ({ path }) => settings.operatorGet(path.tenant_id, path.environment))
        .handle("operatorUpdateSettings", ({ path, payload }) => settings.operatorUpdate(path.tenant_id, path.environment, payload)))
)
