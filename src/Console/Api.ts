/**
 * The operator plane's endpoint of the console (issue 39): `/operator/v1/operator-accounts`,
 * bearer OPERATOR_TOKEN (what `npm run operator -- create-operator` calls). Kept out of the
 * public OpenAPI document as the operator plane is.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"

import { CreateOperatorAccount, OperatorAccount } from "../Domain/Operator.js"
import { OperatorAuth } from "../Kernel/Security.js"

export class OperatorAccountsApi extends HttpApiGroup.make("operatorAccounts")
  .add(
    HttpApiEndpoint.post("createOperatorAccount", "/operator/v1/operator-accounts")
      .setPayload(CreateOperatorAccount)
      .addSuccess(OperatorAccount, { status: 201 })
  )
  .middleware(OperatorAuth)
  .annotate(OpenApi.Exclude, true)
{}
