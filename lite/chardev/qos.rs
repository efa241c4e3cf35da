// SPDX-License-Identifier: GPL-2.0
//! The QoS family of /dev/lite ioctls: the mode and pacing settings, the class
//! rules (for operators), a process's own class, and the statistics.

use crate::compat::user_slice;
use crate::node::Lite;
use crate::uapi::*;
use crate::uarg::{read_in, require_admin, reserved_zero, write_out};
use core::mem::size_of;
use kernel::prelude::*;

/// Serves the QoS ioctl `cmd` with its argument at `arg`; ENOTTY for any other.
/// `file`: the open file's id, for the class its process chooses.
pub(super) fn ioctl(lite: &Lite, file: u64, cmd: u32, arg: usize) -> Result {
    match cmd {
        LITE_IOC_QOS_GET => write_out(arg, &lite.net.qos.get()),
        LITE_IOC_QOS_SET => {
            require_admin()?;
            lite.net.qos.set(&read_in(arg)?)
        }
        LITE_IOC_CLASS_RULE_ADD | LITE_IOC_CLASS_RULE_DEL => {
            require_admin()?;
            let rule: LiteClassRule = read_in(arg)?;
            if cmd == LITE_IOC_CLASS_RULE_ADD {
                lite.net.qos.rule_add(&rule)
            } else {
                lite.net.qos.rule_del(&rule)
            }
        }
        LITE_IOC_CLASS_RULES => {
            let mut list: LiteClassRules = read_in(arg)?;
            let rules = lite.net.qos.rules()?;
            let shown = rules.len().min(list.capacity as usize);
            let mut out =
                user_slice(list.entries as usize, shown * size_of::<LiteClassRule>()).writer();
            for rule in &rules[..shown] {
                out.write(rule)?;
            }
            list.count = rules.len() as u32;
            write_out(arg, &list)
        }
        LITE_IOC_CLASS_SELF => {
            let req: LiteClassSelf = read_in(arg)?;
            reserved_zero(&[req.source])?;
            write_out(arg, &req)?;
            write_out(arg, &lite.net.qos.choose(file, req.class)?)
        }
        LITE_IOC_QOS_STAT => write_out(arg, &lite.net.qos.stat(lite.net.paced_stat())),
        _ => Err(ENOTTY),
    }
}
