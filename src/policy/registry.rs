//! The registry: the one list of policies. Each line names a policy (a type that
//! implements [`PolicyKind`] in its own file) and ranks it in the arbiter. From that
//! list come the `[policy.*]` sections the configuration accepts, the policies the
//! controller builds (in list order, which is also the order their losing proposals
//! are listed in the audit log), and the simulator's peers.
//!
//! Adding a policy is a file and one line in the `standard_policies!` list below; a test
//! can add one more with [`Registry::with`] (docs/policies.md, "Adding a policy").

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;

use super::flush::Flush;
use super::free_pages::FreePages;
use super::purge_rate::PurgeRate;
use super::replica::ReplicaLag;
use super::undo::Undo;
use super::watermark::Watermark;
use super::{Policy, PolicyId, PolicyKind};
use crate::config::check::{parse_error, read_policy_table, ConfigError, Ctx};

/// The standard policies, one line each: field of [`PolicyConfig`] (= section name),
/// type, and rank. Priority: lower wins in the arbiter (avoid the sync-flush cliff >
/// protect the foreground > reduce debt > save space); tie_break: lower wins between
/// equal priorities.
macro_rules! standard_policies {
    ($($(#[doc = $doc:literal])* $field:ident: $kind:ty => priority $p:literal, tie_break $t:literal;)*) => {
        /// Every policy's validated section, typed for the standard ones
        /// (`config.policy.purge_rate.min_view_age`), and the registry it was validated
        /// with.
        #[derive(Debug, Clone, PartialEq)]
        pub struct PolicyConfig {
            $($(#[doc = $doc])* pub $field: <$kind as PolicyKind>::Config,)*
            /// Sections of policies registered beyond the standard ones, by name.
            extra: Extra,
            registry: Registry,
        }

        impl Registry {
            /// The standard policies, as listed in `standard_policies!`.
            pub fn standard() -> Registry {
                Registry::empty()$(.with::<$kind>($p, $t))*
            }
        }

        impl PolicyConfig {
            /// The standard sections at their defaults, for `registry`.
            fn blank(registry: Registry) -> Self {
                PolicyConfig {
                    $($field: Default::default(),)*
                    extra: Extra::default(),
                    registry,
                }
            }

            fn slot_mut(&mut self, name: &str) -> Option<&mut dyn Any> {
                $(if name == <$kind as PolicyKind>::NAME {
                    return Some(&mut self.$field);
                })*
                self.extra.0.get_mut(name).map(|b| b.as_any_mut())
            }

            fn slot(&self, name: &str) -> Option<&dyn Any> {
                $(if name == <$kind as PolicyKind>::NAME {
                    return Some(&self.$field);
                })*
                self.extra.0.get(name).map(|b| b.as_any())
            }

            #[cfg(test)]
            const FIELDS: &'static [&'static str] = &[$(stringify!($field)),*];
        }
    };
}

standard_policies! {
    /// Replica lag (seed 004). Asked first, and wins ties with `watermark`: both
    /// throttle purge threads, and this one asks for fewer.
    replica: ReplicaLag => priority 1, tie_break 0;
    /// Flush and redo headroom (seed 001): the sync-flush cliff outranks everything.
    flush: Flush => priority 0, tie_break 0;
    /// The MariaDB 10.6.5 watermark buckets (seed 003): foreground protection.
    watermark: Watermark => priority 1, tie_break 1;
    /// Rate-based purge (seed 000): reduces debt.
    purge_rate: PurgeRate => priority 2, tie_break 0;
    /// Undo tablespaces (seed 002): saves space.
    undo: Undo => priority 3, tie_break 0;
    /// The free pages MariaDB's page cleaner keeps: the only one on
    /// innodb_lru_scan_depth, ranked with the debt it helps reduce.
    free_pages: FreePages => priority 2, tie_break 1;
}

/// One registered policy, its generic parts resolved.
#[derive(Clone, Copy)]
struct Entry {
    id: PolicyId,
    parse: fn(&Ctx<'_>, &[&'static str], &mut PolicyConfig) -> Result<(), ConfigError>,
    reset: fn(&mut PolicyConfig),
    build: fn(&PolicyConfig, PolicyId) -> Option<Box<dyn Policy>>,
}

fn parse_into<P: PolicyKind>(
    cx: &Ctx<'_>,
    names: &[&'static str],
    out: &mut PolicyConfig,
) -> Result<(), ConfigError> {
    let raw: P::Raw = read_policy_table(cx.src, names, Some(P::NAME))
        .map_err(|e| parse_error(cx.src, cx.path, &e))?;
    let cfg = P::validate(raw, &cx.section(format!("policy.{}", P::NAME)))?;
    out.set::<P>(cfg);
    Ok(())
}

fn reset<P: PolicyKind>(out: &mut PolicyConfig) {
    out.set::<P>(P::Config::default());
}

fn build_from<P: PolicyKind>(cfg: &PolicyConfig, id: PolicyId) -> Option<Box<dyn Policy>> {
    P::build(cfg.get::<P>()?, id)
}

/// An ordered list of policies with their ranks.
#[derive(Clone)]
pub struct Registry {
    entries: Vec<Entry>,
}

impl Registry {
    /// No policies at all.
    pub fn empty() -> Registry {
        Registry {
            entries: Vec::new(),
        }
    }

    /// Adds `P` at the end of the list with its rank (see [`PolicyId::new`]).
    ///
    /// # Panics
    /// If a policy of the same name is already registered: two policies cannot share
    /// a section.
    pub fn with<P: PolicyKind>(mut self, priority: u8, tie_break: u8) -> Registry {
        assert!(
            self.id(P::NAME).is_none(),
            "policy {:?} is registered twice",
            P::NAME
        );
        self.entries.push(Entry {
            id: PolicyId::new(P::NAME, priority, tie_break),
            parse: parse_into::<P>,
            reset: reset::<P>,
            build: build_from::<P>,
        });
        self
    }

    /// Section names, in list order.
    pub fn names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.id.name()).collect()
    }

    /// The ranked identity of the policy called `name`.
    pub fn id(&self, name: &str) -> Option<PolicyId> {
        self.entries
            .iter()
            .map(|e| e.id)
            .find(|id| id.name() == name)
    }

    /// Every section at its default.
    pub fn defaults(&self) -> PolicyConfig {
        let mut out = PolicyConfig::blank(self.clone());
        for e in &self.entries {
            (e.reset)(&mut out);
        }
        out
    }

    /// Validates every `[policy.*]` section of the file; a section of a policy that is
    /// not registered is an unknown key.
    pub(crate) fn parse(&self, cx: &Ctx<'_>) -> Result<PolicyConfig, ConfigError> {
        let names = self.names();
        read_policy_table::<()>(cx.src, &names, None)
            .map_err(|e| parse_error(cx.src, cx.path, &e))?;
        let mut out = PolicyConfig::blank(self.clone());
        for e in &self.entries {
            (e.parse)(cx, &names, &mut out)?;
        }
        Ok(out)
    }

    /// The enabled policies, in list order.
    pub fn build(&self, cfg: &PolicyConfig) -> Vec<Box<dyn Policy>> {
        self.entries
            .iter()
            .filter_map(|e| (e.build)(cfg, e.id))
            .collect()
    }

    fn ranks(&self) -> Vec<(&'static str, u8, u8)> {
        self.entries
            .iter()
            .map(|e| (e.id.name(), e.id.priority(), e.id.tie_break()))
            .collect()
    }
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.ranks()).finish()
    }
}

impl PartialEq for Registry {
    fn eq(&self, other: &Self) -> bool {
        self.ranks() == other.ranks()
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        Registry::standard().defaults()
    }
}

impl PolicyConfig {
    /// `P`'s section, if `P` is registered.
    pub fn get<P: PolicyKind>(&self) -> Option<&P::Config> {
        self.slot(P::NAME)?.downcast_ref()
    }

    /// The registry these sections were validated with.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    fn set<P: PolicyKind>(&mut self, cfg: P::Config) {
        match self
            .slot_mut(P::NAME)
            .and_then(|s| s.downcast_mut::<P::Config>())
        {
            Some(slot) => *slot = cfg,
            None => {
                self.extra.0.insert(P::NAME, Box::new(cfg));
            }
        }
    }
}

/// A section of a policy registered at run time, behind `dyn` but still comparable,
/// clonable and printable like the typed ones.
trait AnySection: Send + Sync {
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn clone_box(&self) -> Box<dyn AnySection>;
    fn eq_dyn(&self, other: &dyn AnySection) -> bool;
    fn fmt_dyn(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl<T: Clone + PartialEq + fmt::Debug + Send + Sync + 'static> AnySection for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn clone_box(&self) -> Box<dyn AnySection> {
        Box::new(self.clone())
    }
    fn eq_dyn(&self, other: &dyn AnySection) -> bool {
        other.as_any().downcast_ref::<T>() == Some(self)
    }
    fn fmt_dyn(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

#[derive(Default)]
struct Extra(BTreeMap<&'static str, Box<dyn AnySection>>);

impl Clone for Extra {
    fn clone(&self) -> Self {
        Extra(self.0.iter().map(|(k, v)| (*k, v.clone_box())).collect())
    }
}

impl PartialEq for Extra {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len()
            && self
                .0
                .iter()
                .all(|(k, v)| other.0.get(k).is_some_and(|o| v.eq_dyn(o.as_ref())))
    }
}

impl fmt::Debug for Extra {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Show<'a>(&'a dyn AnySection);
        impl fmt::Debug for Show<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt_dyn(f)
            }
        }
        f.debug_map()
            .entries(self.0.iter().map(|(k, v)| (k, Show(v.as_ref()))))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_fields_are_the_section_names() {
        assert_eq!(
            PolicyConfig::FIELDS,
            Registry::standard().names().as_slice()
        );
    }

    #[test]
    fn ranks_are_explicit() {
        let r = Registry::standard();
        let rank = |n: &str| {
            let id = r.id(n).unwrap();
            (id.priority(), id.tie_break())
        };
        assert!(rank("flush") < rank("replica"));
        assert!(rank("replica") < rank("watermark"));
        assert!(rank("watermark") < rank("purge_rate"));
        assert!(rank("purge_rate") < rank("undo"));
    }
}
