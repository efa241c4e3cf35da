//! What the systemd units rely on, run against the built binary: the manager tells
//! systemd when it listens (Type=notify), and a configuration that cannot work
//! exits with status 78 (RestartPreventExitStatus=78), naming the file and line.
//! The agent's readiness needs /dev/lite and a manager: the VM tests cover it.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A fresh directory for one test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("lite-admin-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("scratch file");
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn lite_admin(config: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_lite-admin"));
    command.env("LITE_CONFIG", config).env_remove("NOTIFY_SOCKET");
    command
}

#[test]
fn the_manager_tells_systemd_when_it_listens() {
    let scratch = Scratch::new("notify");
    let socket_path = scratch.0.join("notify");
    let socket = UnixDatagram::bind(&socket_path).expect("notification socket");
    socket.set_read_timeout(Some(Duration::from_secs(30))).expect("socket timeout");
    let config = scratch.file("lite.conf", "LITE_LISTEN=127.0.0.1:0\n");
    let mut manager = lite_admin(&config)
        .args(["manager", "--pidfile"])
        .arg(scratch.0.join("manager.pid"))
        .env("NOTIFY_SOCKET", &socket_path)
        .stderr(Stdio::null())
        .spawn()
        .expect("start the manager");
    let mut buf = [0u8; 512];
    let received = socket.recv(&mut buf);
    let _ = manager.kill();
    let _ = manager.wait();
    let text = String::from_utf8_lossy(&buf[..received.expect("a notification within 30 s")]).into_owned();
    assert!(text.starts_with("READY=1\nSTATUS=listening on 127.0.0.1:"), "{text:?}");
    assert!(!text.ends_with(":0\n"), "the status names the port bound: {text:?}");
}

#[test]
fn a_bad_configuration_exits_78_naming_the_file_and_line() {
    let scratch = Scratch::new("bad-config");
    let config = scratch.file("lite.conf", "LITE_MANAGER=node0\nLITE_NODE_ID=sixteen\n");
    for command in ["join", "manager", "leave"] {
        let out = lite_admin(&config).arg(command).output().expect("run lite-admin");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{command}: {stderr}");
        let expected = format!("lite-admin: {}:2: LITE_NODE_ID: `sixteen` is not a node id", config.display());
        assert!(stderr.starts_with(&expected), "{command}: {stderr}");
    }
    // Only the commands that use the file read it: `status` fails here, if it
    // does, for want of /dev/lite, not for the file.
    let out = lite_admin(&config).arg("status").output().expect("run lite-admin");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() != Some(78) && !stderr.contains("lite.conf"), "status: {stderr}");
}

#[test]
fn join_without_a_manager_exits_78() {
    let scratch = Scratch::new("no-manager");
    let config = scratch.file("lite.conf", "# nothing set\n");
    let out = lite_admin(&config).arg("join").output().expect("run lite-admin");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{stderr}");
    assert!(stderr.contains(&format!("set LITE_MANAGER in {}", config.display())), "{stderr}");
}
