//! `NetworkAddress`, `ListVolumes`, `DeleteVolume`: the runtime requirements a sandbox can ask
//! for at create (`spec.network`, `spec.volumes`) seen from outside it. Volumes belong to the
//! caller's tenant; a capability token (one sandbox) reaches none.

use crate::service::rpc_table::name as rpc;
use sandboxd_proto::v1 as pb;
use tonic::{Request, Response, Status};
use tracing::Instrument;

use super::{span, SandboxApi};
use crate::auth::Principal;
use crate::core::spec::SandboxId;

pub(super) async fn network_address(
    api: &SandboxApi,
    request: Request<pb::NetworkAddressRequest>,
) -> Result<Response<pb::NetworkAddressResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let id = SandboxId::parse("sandbox_id", &req.sandbox_id)?;
        api.authorize(&principal, id.as_str(), const { super::rpc_table::scope(rpc::NETWORK_ADDRESS) })
            .await?;
        let found = api.backend().network_address(&id).await?;
        Ok(Response::new(pb::NetworkAddressResponse { address: found.address, network: found.network }))
    }
    .instrument(span(rpc::NETWORK_ADDRESS, &req.sandbox_id))
    .await
}

pub(super) async fn list_volumes(
    api: &SandboxApi,
    request: Request<pb::ListVolumesRequest>,
) -> Result<Response<pb::ListVolumesResponse>, Status> {
    let principal = Principal::of(&request);
    async {
        let tenant = volume_owner(&principal)?;
        let volumes = api.backend().list_volumes(tenant).await?;
        Ok(Response::new(pb::ListVolumesResponse {
            volumes: volumes
                .into_iter()
                .map(|v| pb::VolumeInfo { name: v.name, created_at_unix_ms: v.created_at_unix_ms })
                .collect(),
        }))
    }
    .instrument(span(rpc::LIST_VOLUMES, ""))
    .await
}

pub(super) async fn delete_volume(
    api: &SandboxApi,
    request: Request<pb::DeleteVolumeRequest>,
) -> Result<Response<pb::DeleteVolumeResponse>, Status> {
    let principal = Principal::of(&request);
    let req = request.into_inner();
    async {
        let tenant = volume_owner(&principal)?;
        api.backend().delete_volume(tenant, &req.name).await?;
        Ok(Response::new(pb::DeleteVolumeResponse {}))
    }
    .instrument(span(rpc::DELETE_VOLUME, ""))
    .await
}

/// Whose volumes the caller reaches: the operator the tenant-less ones, a tenant its own; a
/// capability token names one sandbox and no volume.
fn volume_owner(principal: &Principal) -> Result<Option<&str>, Status> {
    match principal {
        Principal::Token(_) => Err(Status::permission_denied(
            "a capability token reaches its sandbox only; volumes need the tenant's key",
        )),
        other => Ok(other.tenant()),
    }
}
