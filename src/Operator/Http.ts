import { Effect, Layer, Redacted } from "effect"

import { Api } from "../Api.js"
import { AuthenticationFailed } from "../Kernel/Errors.js"
import * as HttpGroup from "../Kernel/HttpGroup.js"
import { OperatorAuth } from "../Kernel/Security.js"
import { actingOperator, UnitOfWork } from "../Kernel/UnitOfWork.js"
import { Operator } from "../Operator.js"
import { SigningKeys, Tools } from "../Tools.js"
import { OperatorToken } from "./Token.js"

export const OperatorAuthLive = Layer.effect(
  OperatorAuth,
  Effect.map(Effect.all([OperatorToken, UnitOfWork]), ([token, work]) =>
    OperatorAuth.of({
      // the edge resolved the token already (one lookup of a personal token per request); else now
      OperatorToken: (candidate) =>
        Effect.flatMap(
          Effect.flatMap(work.operator, (who) => who !== undefined ? Effect.succeed(who) : token.whoIs(Redacted.value(candidate))),
          (who) =>
            who !== undefined
              ? Effect.void
              : Effect.fail(new AuthenticationFailed({ code: "invalid_operator_token", message: "Invalid operator token" }))
        )
    }))
)

export const OperatorLive = HttpGroup.group(Api, "operator", (handlers) =>
  Effect.gen(function*() {
    const operator = yield* Operator
    const tools = yield* Tools
    const signing = yield* SigningKeys
    return handlers
      .handle("getCellStats", ({ path }) => operator.cellStats(path.tenant_id, path.environment))
      .handle("setCellShare", ({ path, payload }) => operator.setCellWeight(path.tenant_id, path.environment, payload.weight))
      .handle("getCluster", () => operator.cluster)
      .handle("operatorGetRun", ({ path }) => operator.getRun(path.tenant_id, path.environment, path.run_id))
      .handle("reviewConnection", ({ path, payload }) => tools.review(path.id, payload.decision, payload.note))
      .handle("rotateSigningKey", ({ path }) =>
        Effect.gen(function*() {
          yield* signing.jwksOf(path.tenant_id, path.environment) // 404 for an unknown cell
          const rotated = yield* signing.rotate({ tenantId: path.tenant_id, environment: path.environment })
          return { kid: rotated.kid, retired_publish_until: rotated.retired_publish_until.toISOString() }
        }))
      .handle("submitPilotApplication", ({ payload }) => operator.submitPilot(payload))
      .handle("getPilotApplication", ({ path }) => operator.getPilot(path.id))
      .handle("approvePilotApplication", ({ path }) =>
        Effect.flatMap(actingOperator, (by) => operator.approvePilotBy(path.id, by ?? "operator", null)))
      .handle("operatorCreateApiKey", ({ path, payload }) =>
        operator.createKey(path.tenant_id, path.environment, payload))
      .handle("getQuickstart", ({ path }) => operator.getQuickstart(path.tenant_id, path.environment))
  }))
