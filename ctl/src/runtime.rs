//! `sandboxctl address ID` (where another sandbox on its network dials it) and
//! `sandboxctl volume ls|rm` (the server's named volumes of the caller's tenant).

use clap::{Args, Subcommand};
use sandboxd_client::{proto, Client};

use crate::error::CtlError;

#[derive(Debug, Args)]
pub struct AddressArgs {
    /// The sandbox.
    sandbox_id: String,
}

#[derive(Debug, Args)]
pub struct VolumeArgs {
    #[command(subcommand)]
    command: VolumeCommand,
}

#[derive(Debug, Subcommand)]
enum VolumeCommand {
    /// List the named volumes (one name per line).
    Ls,
    /// Remove named volumes and their data (refused while a sandbox mounts one).
    Rm {
        /// Volume names.
        #[arg(required = true)]
        names: Vec<String>,
    },
}

/// Prints `ADDRESS` (and the network's name after a tab when the sandbox chose one).
pub async fn address(client: &Client, args: AddressArgs) -> Result<i32, CtlError> {
    let request = proto::NetworkAddressRequest { sandbox_id: args.sandbox_id };
    let found = client.raw().network_address(request).await?.into_inner();
    if found.network.is_empty() {
        println!("{}", found.address);
    } else {
        println!("{}\t{}", found.address, found.network);
    }
    Ok(0)
}

pub async fn volume(client: &Client, args: VolumeArgs) -> Result<i32, CtlError> {
    match args.command {
        VolumeCommand::Ls => {
            let listed = client.raw().list_volumes(proto::ListVolumesRequest {}).await?.into_inner();
            for volume in listed.volumes {
                println!("{}", volume.name);
            }
        }
        VolumeCommand::Rm { names } => {
            for name in names {
                client.raw().delete_volume(proto::DeleteVolumeRequest { name: name.clone() }).await?;
                println!("{name}");
            }
        }
    }
    Ok(0)
}
