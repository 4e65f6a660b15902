/** The operator plane (D1): `/operator/v1`, bearer OPERATOR_TOKEN, never accepted on /v1. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"

import { CellStats } from "../Cells/Protocol.js"
import {
  CellShare,
  ClusterView,
  CreatePilotApplication,
  OperatorCreateKey,
  PilotApplication,
  PilotApproval,
  Quickstart,
  SetCellShare
} from "../Domain/Operator.js"
import { CreatedApiKey } from "../Domain/Platform.js"
import { Run } from "../Domain/Runs.js"
import { Connection, ReviewConnection } from "../Domain/Tools.js"
import { environment, idParam, tenantId } from "../Kernel/Params.js"
import { OperatorAuth } from "../Kernel/Security.js"

const id = idParam("id")
const runId = idParam("run_id")

export class OperatorApi extends HttpApiGroup.make("operator")
  .add(
    HttpApiEndpoint.post("submitPilotApplication", "/operator/v1/pilot-applications")
      .setPayload(CreatePilotApplication)
      .addSuccess(PilotApplication, { status: 201 })
  )
  .add(
    HttpApiEndpoint.get("getPilotApplication")`/operator/v1/pilot-applications/${id}`
      .addSuccess(PilotApplication)
  )
  .add(
    HttpApiEndpoint.post("approvePilotApplication")`/operator/v1/pilot-applications/${id}/approve`
      .addSuccess(PilotApproval)
  )
  .add(
    HttpApiEndpoint.post("operatorCreateApiKey")`/operator/v1/tenants/${tenantId}/environments/${environment}/api-keys`
      .setPayload(OperatorCreateKey)
      .addSuccess(CreatedApiKey, { status: 201 })
  )
  .add(
    HttpApiEndpoint.get("getQuickstart")`/operator/v1/tenants/${tenantId}/environments/${environment}/quickstart`
      .addSuccess(Quickstart)
  )
  .add(
    HttpApiEndpoint.post("reviewConnection")`/operator/v1/connections/${id}/review`
      .setPayload(ReviewConnection)
      .addSuccess(Connection)
  )
  .add(
    HttpApiEndpoint.post("rotateSigningKey")`/operator/v1/tenants/${tenantId}/environments/${environment}/signing-keys/rotate`
      .addSuccess(Schema.Struct({ kid: Schema.String, retired_publish_until: Schema.String }))
  )
  .add(
    HttpApiEndpoint.get("operatorGetRun")`/operator/v1/tenants/${tenantId}/environments/${environment}/runs/${runId}`
      .addSuccess(Run)
  )
  .add(
    HttpApiEndpoint.get("getCellStats")`/operator/v1/tenants/${tenantId}/environments/${environment}/cell`
      .addSuccess(Schema.extend(CellStats, Schema.Struct({ share: CellShare })))
  )
  .add(
    HttpApiEndpoint.put("setCellShare")`/operator/v1/tenants/${tenantId}/environments/${environment}/share`
      .setPayload(SetCellShare)
      .addSuccess(CellShare)
  )
  .add(HttpApiEndpoint.get("getCluster", "/operator/v1/cluster").addSuccess(ClusterView))
  .middleware(OperatorAuth)
  .annotate(OpenApi.Exclude, true)
{}
