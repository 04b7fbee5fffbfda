//! INQUIRY data: the standard page (SPC-4 §6.4.2) and the vital product
//! data pages this core supports (SPC-4 §7.8, SBC-3 §6.6).
//!
//! Supported VPD pages: 00h supported pages, 80h unit serial number, 83h
//! device identification, 8Fh third-party copy, B0h block limits, B1h block device
//! characteristics, B2h logical block provisioning. Every page's length
//! field counts exactly the bytes that follow it.

use crate::cmd::Nexus;
use crate::limits;
use crate::lun::{Identity, LogicalUnit, DEFAULT_PRODUCT, DEFAULT_VENDOR};
use crate::max_transfer::max_transfer_blocks;

/// Peripheral device type: direct-access block device (SPC-4 table 137).
const TYPE_DISK: u8 = 0x00;
/// Peripheral qualifier 011b, type 1Fh: no logical unit at this LUN.
const NO_LUN: u8 = 0x7F;

/// SPC-4 §7.8.6.1 protocol identifier for iSCSI (also iSER): the target
/// port designators name iSCSI ports.
const PROTOCOL_ISCSI: u8 = 0x5;

/// Version descriptors (SPC-4 table 141): SAM-5, SPC-4, SBC-3.
const VERSION_DESCRIPTORS: [u16; 3] = [0x00A0, 0x0460, 0x04C0];

/// Standard INQUIRY byte 5 TPGS=01b (implicit ALUA) for a LUN that is not
/// there; a logical unit reports its own `alua` setting.
pub(crate) const TPGS_IMPLICIT: u8 = 0b01 << 4;

/// Length of the standard INQUIRY data we return.
pub(crate) const STANDARD_LEN: usize = 96;

/// Supported VPD page codes, ascending.
pub(crate) const VPD_PAGES: [u8; 7] = [0x00, 0x80, 0x83, 0x8F, 0xB0, 0xB1, 0xB2];

/// An ASCII field of `len` bytes, left-aligned and space-padded (SPC-4
/// §4.4.1): characters outside 20h..7Eh become '_', extra ones are cut.
fn ascii_field(s: &str, len: usize) -> Vec<u8> {
    let mut out: Vec<u8> = s
        .bytes()
        .map(|b| if (0x20..=0x7E).contains(&b) { b } else { b'_' })
        .take(len)
        .collect();
    out.resize(len, b' ');
    out
}

/// PRODUCT REVISION LEVEL: the crate's major.minor version.
fn revision() -> Vec<u8> {
    let v = format!(
        "{}.{}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    ascii_field(&v, 4)
}

/// Standard INQUIRY data (SPC-4 table 136); `None` describes a LUN with no
/// logical unit (peripheral qualifier 011b, device type 1Fh).
pub(crate) fn standard_inquiry(ident: Option<&Identity>, tpgs: u8) -> Vec<u8> {
    let mut d = vec![0u8; STANDARD_LEN];
    d[0] = if ident.is_some() { TYPE_DISK } else { NO_LUN };
    // RMB: removable medium.
    d[1] = if ident.is_some_and(|i| i.removable) {
        0x80
    } else {
        0x00
    };
    d[2] = 0x06; // VERSION: SPC-4
    d[3] = 0x12; // HISUP=1, RESPONSE DATA FORMAT=2
    d[4] = (STANDARD_LEN - 5) as u8; // ADDITIONAL LENGTH
    d[5] = tpgs; // PROTECT=0
    if ident.is_some() {
        d[5] |= 0x08; // 3PC: EXTENDED COPY is supported
    }
    d[6] = 0x00;
    d[7] = 0x02; // CMDQUE
    let (vendor, product) = ident.map_or((DEFAULT_VENDOR, DEFAULT_PRODUCT), |i| {
        (i.vendor.as_str(), i.product.as_str())
    });
    d[8..16].copy_from_slice(&ascii_field(vendor, 8));
    d[16..32].copy_from_slice(&ascii_field(product, 16));
    d[32..36].copy_from_slice(&revision());
    for (i, v) in VERSION_DESCRIPTORS.iter().enumerate() {
        let at = 58 + 2 * i;
        d[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }
    d
}

/// A VPD page with a 2-byte PAGE LENGTH (SPC-4 table 464).
fn vpd(code: u8, body: &[u8]) -> Vec<u8> {
    let len = u16::try_from(body.len()).unwrap_or(u16::MAX).to_be_bytes();
    let mut d = vec![TYPE_DISK, code, len[0], len[1]];
    d.extend_from_slice(body);
    d
}

/// The unit serial number as ASCII (at most `max` bytes), or the NAA id in
/// hex when none was configured.
fn serial(ident: &Identity, max: usize) -> Vec<u8> {
    let s = if ident.serial.is_empty() {
        format!("{:016x}", ident.naa_id)
    } else {
        ident.serial.clone()
    };
    ascii_field(&s, s.len().min(max))
}

/// One designation descriptor (SPC-4 table 483).
fn designator(protocol: u8, code_set: u8, piv_assoc_type: u8, data: &[u8]) -> Vec<u8> {
    let data = data.get(..255).unwrap_or(data);
    let mut d = vec![
        (protocol << 4) | code_set,
        piv_assoc_type,
        0,
        data.len() as u8,
    ];
    d.extend_from_slice(data);
    d
}

/// SCSI name string: UTF-8, null-terminated, padded to a multiple of four
/// (SPC-4 §7.8.6.11), at most 252 bytes.
fn name_string(name: &str) -> Vec<u8> {
    let mut v: Vec<u8> = name.bytes().take(251).collect();
    v.push(0);
    while v.len() % 4 != 0 {
        v.push(0);
    }
    v
}

/// Device identification page (SPC-4 §7.8.6).
fn device_identification(ident: &Identity, nexus: &Nexus) -> Vec<u8> {
    let mut body = Vec::new();
    // Logical unit: NAA (binary, type 3).
    body.extend(designator(0, 0x1, 0x03, &ident.designator()));
    // Logical unit: T10 vendor ID (ASCII, type 1): vendor + serial.
    let mut t10 = ascii_field(&ident.vendor, 8);
    t10.extend(serial(ident, 255 - 8));
    body.extend(designator(0, 0x2, 0x01, &t10));
    // Target port: SCSI name string (UTF-8, PIV, type 8).
    body.extend(designator(
        PROTOCOL_ISCSI,
        0x3,
        0x98,
        &name_string(&nexus.target_port),
    ));
    // Target port: relative target port identifier (PIV, type 4).
    let rel = nexus.relative_port_id.to_be_bytes();
    body.extend(designator(
        PROTOCOL_ISCSI,
        0x1,
        0x94,
        &[0, 0, rel[0], rel[1]],
    ));
    // Target port: target port group (PIV, type 5).
    let grp = nexus.port_group.to_be_bytes();
    body.extend(designator(
        PROTOCOL_ISCSI,
        0x1,
        0x95,
        &[0, 0, grp[0], grp[1]],
    ));
    vpd(0x83, &body)
}

/// Block limits page (SBC-3 §6.6.3, SBC-4 §6.6.4), page length 3Ch.
/// MAXIMUM TRANSFER LENGTH is set here; compare-and-write, granularity,
/// unmap, write same and atomic limits come from [`limits`].
fn block_limits(lu: &LogicalUnit) -> Vec<u8> {
    let mut body = vec![0u8; 0x3C];
    let max = max_transfer_blocks(lu.geometry().block_size);
    limits::fill_block_limits(lu, &mut body);
    // MAXIMUM TRANSFER LENGTH.
    body[4..8].copy_from_slice(&max.to_be_bytes());
    // OPTIMAL TRANSFER LENGTH and MAXIMUM PREFETCH LENGTH: zero (not
    // reported).
    vpd(0xB0, &body)
}

/// Block device characteristics page (SBC-3 §6.6.2): non-rotating medium,
/// form factor not reported; WABEREQ and WACEREQ 01b (reads after a block
/// or cryptographic erase succeed) when those sanitize operations exist.
fn block_characteristics(erase: bool) -> Vec<u8> {
    let mut body = vec![0u8; 0x3C];
    body[0..2].copy_from_slice(&1u16.to_be_bytes());
    if erase {
        body[3] = 0x50;
    }
    vpd(0xB1, &body)
}

/// Logical block provisioning page (SBC-3 §6.6.4), from [`limits`].
fn logical_block_provisioning(lu: &LogicalUnit) -> Vec<u8> {
    vpd(0xB2, &limits::provisioning_body(lu))
}

/// A VPD page, or `None` if `code` is not supported.
pub(crate) fn page(code: u8, lu: &LogicalUnit, nexus: &Nexus) -> Option<Vec<u8>> {
    match code {
        0x00 => Some(vpd(0x00, &VPD_PAGES)),
        0x80 => Some(vpd(0x80, &serial(&lu.ident, 252))),
        0x83 => Some(device_identification(&lu.ident, nexus)),
        0xB0 => Some(block_limits(lu)),
        0x8F => Some(vpd(0x8F, &crate::xcopy::third_party_copy_page())),
        0xB1 => Some(block_characteristics(crate::sanitize_cmd::erase_supported(
            lu,
        ))),
        0xB2 => Some(logical_block_provisioning(lu)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident() -> Identity {
        Identity {
            vendor: "RUSTGT".into(),
            product: "VIRTUAL-DISK".into(),
            serial: "abc123".into(),
            naa_id: 0x0102_0304_0506_0708,
            naa: None,
            removable: false,
        }
    }

    #[test]
    fn standard_inquiry_layout() {
        let d = standard_inquiry(Some(&ident()), TPGS_IMPLICIT);
        assert_eq!(d.len(), 96);
        assert_eq!(&d[..8], &[0x00, 0x00, 0x06, 0x12, 91, 0x18, 0x00, 0x02]);
        assert_eq!(&d[8..16], b"RUSTGT  ");
        assert_eq!(&d[16..32], b"VIRTUAL-DISK    ");
        assert_eq!(&d[32..36], b"0.1 ");
        assert_eq!(&d[58..64], &[0x00, 0xA0, 0x04, 0x60, 0x04, 0xC0]);
        assert!(d[64..].iter().all(|&b| b == 0));
        let none = standard_inquiry(None, TPGS_IMPLICIT);
        assert_eq!(none[0], 0x7F);
        assert_eq!(none[4], 91);
        assert_eq!(none[5] & 0x08, 0, "no copy manager without a unit");
        let removable = Identity {
            removable: true,
            ..ident()
        };
        assert_eq!(standard_inquiry(Some(&removable), TPGS_IMPLICIT)[1], 0x80);
    }

    #[test]
    fn ascii_fields_are_sanitised() {
        assert_eq!(ascii_field("a\u{e9}\n", 6), b"a___  ".to_vec());
        assert_eq!(ascii_field("123456789", 8), b"12345678".to_vec());
    }

    #[test]
    fn naa_designator_value() {
        let v = crate::registry::naa_registered_extended(0x1122_3344_5566_7788);
        assert_eq!(
            v,
            [0x60, 0, 0, 0, 0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
        );
    }

    #[test]
    fn a_configured_designator_beats_the_derived_one() {
        let wwn = [
            0x60, 0, 0, 0x05, 0x83, 0x59, 0x22, 0x46, 0x25, 0x09, 0x6a, 0x2d, 0x01, 0x3d, 0xfd,
            0x15,
        ];
        let ident = Identity {
            naa: Some(wwn),
            ..ident()
        };
        assert_eq!(ident.designator(), wwn);
        let nexus = Nexus {
            id: 1,
            initiator_port: "iqn.i".into(),
            target_port: "iqn.t,t,0x0001".into(),
            relative_port_id: 3,
            port_group: 7,
            lun_map: None,
        };
        let p = device_identification(&ident, &nexus);
        // The first descriptor: logical unit, binary, NAA, 16 bytes.
        assert_eq!(&p[4..8], &[0x01, 0x03, 0x00, 0x10]);
        assert_eq!(&p[8..24], &wwn);
    }

    #[test]
    fn device_identification_layout() {
        let nexus = Nexus {
            id: 1,
            initiator_port: "iqn.i".into(),
            target_port: "iqn.t,t,0x0001".into(),
            relative_port_id: 3,
            port_group: 7,
            lun_map: None,
        };
        let p = device_identification(&ident(), &nexus);
        assert_eq!(&p[..2], &[0x00, 0x83]);
        let len = usize::from(u16::from_be_bytes([p[2], p[3]]));
        assert_eq!(len, p.len() - 4);
        // NAA first.
        assert_eq!(&p[4..8], &[0x01, 0x03, 0x00, 16]);
        assert_eq!(p[8] >> 4, 6);
        // T10 vendor id: 8 + 6 bytes.
        assert_eq!(&p[24..28], &[0x02, 0x01, 0x00, 14]);
        assert_eq!(&p[28..42], b"RUSTGT  abc123");
        // Target port name: "iqn.t,t,0x0001" + NUL padded to 16.
        assert_eq!(&p[42..46], &[0x53, 0x98, 0x00, 16]);
        assert_eq!(&p[46..60], b"iqn.t,t,0x0001");
        assert_eq!(&p[60..62], &[0, 0]);
        // Relative port and port group.
        assert_eq!(&p[62..70], &[0x51, 0x94, 0, 4, 0, 0, 0, 3]);
        assert_eq!(&p[70..78], &[0x51, 0x95, 0, 4, 0, 0, 0, 7]);
        assert_eq!(p.len(), 78);
    }

    #[test]
    fn fixed_pages() {
        use crate::max_transfer::MAX_TRANSFER_BYTES;
        let b1 = block_characteristics(false);
        assert_eq!(b1.len(), 64);
        assert_eq!(&b1[..8], &[0, 0xB1, 0, 0x3C, 0, 1, 0, 0]);
        assert_eq!(block_characteristics(true)[7], 0x50);
        assert_eq!(max_transfer_blocks(512), 16384);
        assert_eq!(max_transfer_blocks(4096), 2048);
        assert_eq!(max_transfer_blocks(0), MAX_TRANSFER_BYTES);
    }
}
