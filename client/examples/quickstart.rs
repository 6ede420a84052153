//! The README's Rust example: start a sandbox, run a command, copy a file in and out, stop it.
use sandboxd_client::{spec, Client, Sandbox};

pub async fn run(addr: &str, image: &str) -> Result<String, Box<dyn std::error::Error>> {
    let client = Client::connect(addr).await?;
    let sandbox = Sandbox::start(&client, spec(image)).await?;
    let out = sandbox.exec("echo hello from rust").await?;
    let dir = std::env::temp_dir().join(sandbox.id());
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("in.txt"), "kept")?;
    sandbox.upload(dir.join("in.txt"), "/tmp/in.txt").await?;
    sandbox.download("/tmp/in.txt", dir.join("out.txt")).await?;
    let kept = std::fs::read_to_string(dir.join("out.txt"))?;
    sandbox.stop().await?;
    std::fs::remove_dir_all(&dir)?;
    Ok(format!("{} {}{kept}", out.return_code, String::from_utf8_lossy(&out.stdout)))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("SANDBOXD_ADDR").unwrap_or_else(|_| "127.0.0.1:50051".into());
    print!("{}", run(&addr, "sandboxd-starter:latest").await?); // 0 hello from rust\nkept
    Ok(())
}
