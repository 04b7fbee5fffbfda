//! The sleeping hddsim engine and its shared devices.
//!
//! Guarantees:
//! - the service time of every read and write comes from the same model
//!   the simulation uses; requests are served in arrival order per disk
//!   (one actuator queue each), with no lock held while sleeping;
//! - data lives in a [`RamBackstore`] or a sparse [`FileBackstore`], so
//!   reads return what was written; timing never changes data;
//! - LUNs naming the same device share it (process-wide registry); a device
//!   is dropped when its last LUN goes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

use super::model::{ArrayParams, ArrayState};
use crate::common::{check_range, check_write, len_u64};
use crate::file::{FileBackstore, FileOptions};
use crate::ram::RamBackstore;
use crate::{
    error::BackstoreError, error::Result, geometry::DeviceKey, geometry::Extent,
    geometry::Geometry, spec::BackstoreSpec, store::Backstore,
};

/// Where an hddsim LUN sits and on what.
#[derive(Debug, Clone, PartialEq)]
pub struct HddSimOptions {
    /// Device name: LUNs naming the same device share its disks.
    pub device: String,
    /// Byte offset of the LUN on the device.
    pub offset: u64,
    /// The device's disks.
    pub array: ArrayParams,
    /// Wall-clock seconds per simulated second (1.0 = real time; smaller
    /// runs faster, e.g. for demonstrations).
    pub time_scale: f64,
}

impl Default for HddSimOptions {
    /// LUN at offset 0 of device "md0", the seed's RAID-0 of two disks, real time.
    fn default() -> Self {
        Self {
            device: "md0".into(),
            offset: 0,
            array: ArrayParams::default(),
            time_scale: 1.0,
        }
    }
}

/// A simulated device shared by the LUNs on it.
#[derive(Debug)]
pub struct SimDevice {
    name: String,
    params: ArrayParams,
    scale: f64,
    epoch: Instant,
    state: Mutex<ArrayState>,
}

fn registry() -> &'static Mutex<HashMap<String, Weak<SimDevice>>> {
    static DEVICES: OnceLock<Mutex<HashMap<String, Weak<SimDevice>>>> = OnceLock::new();
    DEVICES.get_or_init(|| Mutex::new(HashMap::new()))
}

impl SimDevice {
    /// The live device called `name`, or a new one. Naming a live device
    /// with different parameters is a configuration error.
    pub fn named(name: &str, params: ArrayParams, time_scale: f64) -> Result<Arc<SimDevice>> {
        if !(time_scale.is_finite() && time_scale > 0.0) {
            return Err(BackstoreError::Config(format!(
                "hddsim device {name}: time scale must be positive"
            )));
        }
        let mut devices = registry().lock().unwrap_or_else(PoisonError::into_inner);
        devices.retain(|_, d| d.strong_count() > 0);
        if let Some(dev) = devices.get(name).and_then(Weak::upgrade) {
            if dev.params != params || dev.scale != time_scale {
                return Err(BackstoreError::Config(format!(
                    "hddsim device {name} already exists with other parameters"
                )));
            }
            return Ok(dev);
        }
        let dev = Arc::new(SimDevice {
            name: name.to_owned(),
            params,
            scale: time_scale,
            epoch: Instant::now(),
            state: Mutex::new(ArrayState::new(params)),
        });
        devices.insert(name.to_owned(), Arc::downgrade(&dev));
        Ok(dev)
    }

    /// The device's name, which LUNs use to share it (e.g. "md0").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The disk and striping parameters the device was created with.
    pub fn params(&self) -> &ArrayParams {
        &self.params
    }

    /// Requests served (pieces per disk) and model busy time, ns.
    pub fn busy(&self) -> (u64, u64) {
        let st = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        (st.requests, st.busy_ns)
    }

    /// Queues a request on the model and returns when it completes, in
    /// wall-clock time.
    fn reserve(&self, offset: u64, len: u64) -> Instant {
        let now_model = (self.epoch.elapsed().as_nanos() as f64 / self.scale) as u64;
        let done_model = self
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .submit(now_model, offset, len);
        self.epoch + Duration::from_nanos((done_model as f64 * self.scale) as u64)
    }

    /// Serves a request: queue it, then sleep until the disks are done.
    fn serve(&self, offset: u64, len: u64) {
        let done = self.reserve(offset, len);
        let now = Instant::now();
        if done > now {
            std::thread::sleep(done - now);
        }
    }
}

/// An hddsim LUN: data in RAM or a sparse file, timing from the model.
#[derive(Debug)]
pub struct HddSimBackstore {
    data: Arc<dyn Backstore>,
    device: Arc<SimDevice>,
    base: u64,
    geometry: Geometry,
}

impl HddSimBackstore {
    /// A LUN of `size` bytes at `opts.offset` on device `opts.device`, with
    /// its data in RAM (`path` `None`) or in a sparse file at `path`.
    pub fn open(
        size: u64,
        block_size: u32,
        read_only: bool,
        path: Option<&Path>,
        opts: &HddSimOptions,
    ) -> Result<Self> {
        let capacity = opts.array.capacity();
        if opts
            .offset
            .checked_add(size)
            .is_none_or(|end| end > capacity)
        {
            return Err(BackstoreError::Config(format!(
                "hddsim LUN of {size} bytes at offset {} does not fit device {} of {capacity} bytes",
                opts.offset, opts.device
            )));
        }
        let data: Arc<dyn Backstore> = match path {
            Some(p) => Arc::new(FileBackstore::open(
                p,
                &FileOptions {
                    size: Some(size),
                    block_size,
                    read_only,
                    thin: true,
                    direct: false,
                },
            )?),
            None => Arc::new(RamBackstore::new(size, block_size, read_only)?),
        };
        let device = SimDevice::named(&opts.device, opts.array, opts.time_scale)?;
        Ok(Self {
            geometry: data.geometry(),
            data,
            device,
            base: opts.offset,
        })
    }

    /// From a [`BackstoreSpec`] of kind `hddsim` (size required, path optional).
    pub fn from_spec(spec: &BackstoreSpec, opts: &HddSimOptions) -> Result<Self> {
        let size = spec
            .size
            .ok_or_else(|| BackstoreError::Config("hddsim backstore: a size is required".into()))?;
        Self::open(
            size,
            spec.block_size,
            spec.read_only,
            spec.path.as_deref(),
            opts,
        )
    }

    /// The device this LUN is on.
    pub fn device(&self) -> &Arc<SimDevice> {
        &self.device
    }
}

impl Backstore for HddSimBackstore {
    fn kind(&self) -> &'static str {
        "hddsim"
    }

    fn device_key(&self) -> Option<DeviceKey> {
        Some(DeviceKey {
            key: format!("hddsim:{}", self.device.name()),
            seeks: true,
        })
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        check_range(&self.geometry, offset, len_u64(buf.len()))?;
        self.device.serve(self.base + offset, len_u64(buf.len()));
        self.data.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> Result<()> {
        check_write(&self.geometry, offset, len_u64(buf.len()))?;
        self.device.serve(self.base + offset, len_u64(buf.len()));
        self.data.write_at(buf, offset, fua)
    }

    fn flush(&self) -> Result<()> {
        self.data.flush()
    }

    fn write_same(&self, pattern: &[u8], offset: u64, len: u64) -> Result<()> {
        check_write(&self.geometry, offset, len)?;
        self.device.serve(self.base + offset, len);
        self.data.write_same(pattern, offset, len)
    }

    fn unmap(&self, offset: u64, len: u64) -> Result<()> {
        self.data.unmap(offset, len)
    }

    fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>> {
        self.data.extents(offset, len)
    }

    fn supports_write_same(&self) -> bool {
        self.data.supports_write_same()
    }

    fn supports_unmap(&self) -> bool {
        self.data.supports_unmap()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(device: &str, offset: u64) -> HddSimOptions {
        HddSimOptions {
            device: device.into(),
            offset,
            time_scale: 1e-6,
            ..HddSimOptions::default()
        }
    }

    #[test]
    fn luns_on_one_device_share_its_disks() {
        let a =
            HddSimBackstore::open(1 << 20, 512, false, None, &opts("t-share", 0)).expect("lun a");
        let far = 450_000_000_000 / 65536 * 65536;
        let b =
            HddSimBackstore::open(1 << 20, 512, false, None, &opts("t-share", far)).expect("lun b");
        assert!(Arc::ptr_eq(a.device(), b.device()));
        let mut buf = vec![0u8; 65536];
        a.read_at(&mut buf, 0).expect("read a");
        b.read_at(&mut buf, 0).expect("read b");
        a.read_at(&mut buf, 65536).expect("read a");
        let (requests, busy) = a.device().busy();
        assert_eq!(requests, 3);
        // Two long seeks (to b and back) dominate: well over 20 ms of model time.
        assert!(busy > 20_000_000, "{busy}");
        let other = HddSimOptions {
            array: ArrayParams::single(Default::default()),
            ..opts("t-share", 0)
        };
        assert!(HddSimBackstore::open(1 << 20, 512, false, None, &other).is_err());
    }

    #[test]
    fn data_round_trips_and_ranges_are_checked() {
        let s = HddSimBackstore::open(1 << 20, 512, false, None, &opts("t-data", 0)).expect("lun");
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
        s.write_at(&data, 4096, false).expect("write");
        let mut back = vec![0u8; 8192];
        s.read_at(&mut back, 4096).expect("read");
        assert_eq!(back, data);
        assert!(matches!(
            s.read_at(&mut back, (1 << 20) - 512),
            Err(BackstoreError::OutOfRange { .. })
        ));
        let too_far = opts("t-data2", 499_999_999_000);
        assert!(HddSimBackstore::open(1 << 20, 512, false, None, &too_far).is_err());
    }
}
