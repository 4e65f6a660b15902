import { Schema } from "effect"

import { SingleLine } from "../Kernel/Strings.js"

import { strictBody } from "../Kernel/Body.js"

import { Timestamp } from "../Kernel/Ids.js"
import { Email } from "./Platform.js"

export const CreatePilotApplication = strictBody(
  Schema.Struct({
    organization_name: SingleLine.pipe(Schema.trimmed(), Schema.minLength(1), Schema.maxLength(200)),
    contact_email: Email
  }).annotations({ identifier: "CreatePilotApplication" })
)

export const PilotApplication = Schema.Struct({
  id: Schema.String,
  object: Schema.Literal("pilot_application"),
  organization_name: Schema.String,
  contact_email: Schema.String,
  status: Schema.Literal("submitted", "approved", "rejected"),
  tenant_id: Schema.NullOr(Schema.String),
  created_at: Timestamp
}).annotations({ identifier: "PilotApplication" })
export type PilotApplication = typeof PilotApplication.Type

export const PilotApproval = Schema.Struct({
  id: Schema.String,
  status: Schema.Literal("approved"),
  tenant_id: Schema.String,
  environment: Schema.Literal("sandbox")
}).annotations({ identifier: "PilotApproval" })

export const OperatorCreateKey = strictBody(
  Schema.Struct({
    name: SingleLine.pipe(Schema.trimmed(), Schema.minLength(1), Schema.maxLength(200)),
    scopes: Schema.optional(Schema.Array(Schema.String).pipe(Schema.minItems(1))).annotations({
      description: "Omit for the first key (quickstart abilities); otherwise exactly these scopes"
    })
  }).annotations({ identifier: "OperatorCreateKey" })
)

/**
 * The console quickstart of an environment (contract part 1, D1): resource ids, not credentials.
 * Made once when the environment is provisioned; the same ids on every read.
 */
export const Quickstart = Schema.Struct({
  service_actor_id: Schema.String,
  workspace_id: Schema.String,
  agent_revision_id: Schema.String
}).annotations({ identifier: "Quickstart" })
export type Quickstart = typeof Quickstart.Type

/** A runner of the cluster (issue 19), as `cluster_runners` has it. */
export const ClusterRunner = Schema.Struct({
  address: Schema.String.annotations({ description: "`host:port` of the runner's cluster transport (RUNNER_HOST:RUNNER_PORT)" }),
  healthy: Schema.Boolean.annotations({ description: "alive (heartbeat within CLUSTER_LOCK_EXPIRATION_SECONDS) and not marked unhealthy" }),
  last_heartbeat: Timestamp,
  self: Schema.Boolean.annotations({ description: "the node that answered" })
}).annotations({ identifier: "ClusterRunner" })

/** A cell running now, and on which runner. */
export const ClusterCell = Schema.Struct({
  tenant_id: Schema.String,
  environment: Schema.String,
  runner: Schema.String,
  generation: Schema.Number,
  started_at: Timestamp
}).annotations({ identifier: "ClusterCell" })

/** `GET /operator/v1/cluster`: the runners, and the cells active on the live ones (same answer on any node). */
export const ClusterView = Schema.Struct({
  runners: Schema.Array(ClusterRunner),
  cells: Schema.Array(ClusterCell)
}).annotations({ identifier: "ClusterView" })
export type ClusterView = typeof ClusterView.Type

/** A resource of the node as one cell has it (issue 36). */
export const ShareUse = Schema.Struct({
  capacity: Schema.Number.annotations({ description: "units of the resource on this node (all cells')" }),
  in_use: Schema.Number.annotations({ description: "units the cell holds now" }),
  waiting: Schema.Number.annotations({ description: "the cell's requests waiting for a unit now" }),
  grants: Schema.Number.annotations({ description: "units granted to the cell since this node started" }),
  waited_seconds: Schema.Number.annotations({ description: "the sum of those grants' waits" })
}).annotations({ identifier: "ShareUse" })

/** A cell's fair share of the node that answered (issue 36). */
export const CellShare = Schema.Struct({
  weight: Schema.Number.annotations({
    description: "the cell's weight: a cell of weight 2 gets two turns for one of weight 1 when both wait"
  }),
  weight_source: Schema.Literal("default", "config", "operator").annotations({
    description: "where the weight comes from: 1 by default, the node's CELL_WEIGHTS, or the operator API (which wins)"
  }),
  resources: Schema.Struct({ db: ShareUse, steps: ShareUse, outbound: ShareUse, bytes: ShareUse })
}).annotations({ identifier: "CellShare" })
export type CellShare = typeof CellShare.Type

/** `PUT /operator/v1/tenants/{t}/environments/{e}/share`. */
export const SetCellShare = strictBody(
  Schema.Struct({
    weight: Schema.NullOr(Schema.Number.pipe(Schema.greaterThan(0), Schema.lessThanOrEqualTo(1000))).annotations({
      description: "The cell's weight (> 0, at most 1000); null goes back to the node's CELL_WEIGHTS, or 1"
    })
  })
)

/** `POST /operator/v1/operator-accounts` (issue 39): an operator's console account. */
export const CreateOperatorAccount = Schema.Struct({ email: Schema.String.pipe(Schema.maxLength(320)) })

/** The account made, with its password, shown this once (the operator enrols TOTP at first sign-in). */
export const OperatorAccount = Schema.Struct({
  id: Schema.String,
  email: Schema.String,
  password: Schema.String,
  sign_in: Schema.String
})
