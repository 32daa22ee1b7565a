//! The synthetic corpus of `cellar-bench stream`: users sized after the Vespa streaming-search
//! post (35% with 100 documents, 28% 1,000, 22% 10,000, 10% 50,000, 5% 100,000), scaled down,
//! each user's token vectors clustered around a centre of their own. Document `i` of user `u`
//! is a pure function of (seed, u, i).

use std::collections::BTreeMap;

use cellar_search::{DocIn, MetaValue, Metadata, QueryVectorsIn};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::StandardNormal;

/// (share of users, documents per user) in the Vespa post.
pub const VESPA_CLASSES: [(f64, usize); 5] =
    [(0.35, 100), (0.28, 1000), (0.22, 10_000), (0.10, 50_000), (0.05, 100_000)];

#[derive(Clone, Debug, serde::Serialize)]
pub struct User {
    pub name: String,
    /// Index into `VESPA_CLASSES`.
    pub class: usize,
    pub docs: usize,
}

pub struct Corpus {
    pub users: Vec<User>,
    pub tokens: usize,
    pub dim: usize,
    pub seed: u64,
}

fn normalise(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

impl Corpus {
    pub fn new(n_users: usize, scale: f64, tokens: usize, dim: usize, seed: u64) -> Corpus {
        let mut users = Vec::new();
        for (class, (share, size)) in VESPA_CLASSES.iter().enumerate() {
            let count = (n_users as f64 * share).round() as usize;
            let docs = ((*size as f64 * scale).round() as usize).max(1);
            for _ in 0..count {
                users.push(User { name: format!("user{:04}", users.len()), class, docs });
            }
        }
        Corpus { users, tokens, dim, seed }
    }

    pub fn total_docs(&self) -> usize {
        self.users.iter().map(|u| u.docs).sum()
    }

    /// Every (user, doc) pair in a seeded random order: users' writes interleave as in a live feed.
    pub fn feed_order(&self) -> Vec<(u32, u32)> {
        let mut order: Vec<(u32, u32)> = self
            .users
            .iter()
            .enumerate()
            .flat_map(|(u, user)| (0..user.docs as u32).map(move |i| (u as u32, i)))
            .collect();
        order.shuffle(&mut StdRng::seed_from_u64(self.seed));
        order
    }

    fn centre(&self, user: usize) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ (user as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut c: Vec<f32> = (0..self.dim).map(|_| rng.sample(StandardNormal)).collect();
        normalise(&mut c);
        c
    }

    /// Unit vectors near `centre`: mostly the user's topic, partly noise.
    fn near(&self, centre: &[f32], rng: &mut StdRng, n: usize) -> Vec<f32> {
        let mut out = Vec::with_capacity(n * self.dim);
        for _ in 0..n {
            let mut v: Vec<f32> = centre
                .iter()
                .map(|c| c * 0.6 + rng.sample::<f32, _>(StandardNormal) * 0.8 / (self.dim as f32).sqrt())
                .collect();
            normalise(&mut v);
            out.extend(v);
        }
        out
    }

    pub fn doc(&self, user: usize, i: usize) -> DocIn {
        let mut rng = StdRng::seed_from_u64(
            self.seed ^ ((user as u64) << 32 | i as u64).wrapping_mul(0xD6E8_FEB8_6659_FD93),
        );
        let u = &self.users[user];
        let tokens = self.near(&self.centre(user), &mut rng, self.tokens);
        let metadata = Metadata(BTreeMap::from([("kind".to_string(), MetaValue::Int((i % 4) as i64))]));
        DocIn {
            group: Some(u.name.clone()),
            id: format!("d{i:06}"),
            text: format!("message {i} of {} about topic {}", u.name, i % 17),
            vectors: Some(QueryVectorsIn::from_flat(&tokens, self.dim, None)),
            metadata,
            ..DocIn::default()
        }
    }

    /// A query for `user`: `n` token vectors near the user's centre.
    pub fn query(&self, user: usize, n: usize, salt: u64) -> Vec<f32> {
        let mut rng = StdRng::seed_from_u64(self.seed ^ 0xABCD ^ salt ^ (user as u64) << 20);
        self.near(&self.centre(user), &mut rng, n)
    }
}
