// A tp group through Gloo: a full mesh of TCP pairs set up through the rendezvous (a
// directory, or rank 0's TCP store), and Gloo's collectives behind tpcrt::Communicator; the
// same-host transport where every rank is on one host, and where they are on several, the
// hierarchy: inside each host through shared memory, between hosts over TCP among one rank a
// host. A part of a group (split) meets under a prefix of the group's store and chooses its
// transport the same way among its own ranks.
#include "group.h"
#include "rendezvous.h"
#include "tcp_mesh.h"

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/broadcast.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/reduce_scatter.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

namespace tpcrt {

namespace {

/// Gloo's collectives on fp32 host buffers: its allreduce, allgather and alltoall, and the
/// halving-doubling reduce-scatter of its older algorithm classes.
class GlooCommunicator : public Communicator {
public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context)
      : Communicator(context->rank, context->size, sizeof(float)), context(std::move(context)) {}
  bool gathersVariableSizes() const override { return true; }
  std::string pathOf(const std::string &) const override { return "tcp"; }

protected:
  void runAllReduce(void *data, size_t count) override {
    gloo::AllreduceOptions opts(context);
    opts.setOutput(static_cast<float *>(data), count);
    opts.setReduceFunction(
        static_cast<void (*)(void *, const void *, const void *, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  }

  void runAllGather(const void *in, size_t count, void *out) override {
    gloo::AllgatherOptions opts(context);
    opts.setInput(const_cast<float *>(static_cast<const float *>(in)), count);
    opts.setOutput(static_cast<float *>(out), count * world);
    gloo::allgather(opts);
  }

  void runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out) override {
    gloo::AllgathervOptions opts(context);
    opts.setInput(const_cast<float *>(static_cast<const float *>(in)), counts[size_t(rank)]);
    opts.setOutput(static_cast<float *>(out), counts);
    gloo::allgatherv(opts);
  }

  void runReduceScatter(const void *in, size_t count, void *out) override {
    ReduceScatter &rs = reduceScatterOf(count);
    std::memcpy(rs.data.data(), in, rs.data.size() * sizeof(float));
    rs.algorithm->run();
    std::memcpy(out, rs.data.data(), count * sizeof(float)); // this rank's sum comes first
  }

  void runAllToAll(const void *in, size_t count, void *out) override {
    gloo::AlltoallOptions opts(context);
    opts.setInput(const_cast<float *>(static_cast<const float *>(in)), count * world);
    opts.setOutput(static_cast<float *>(out), count * world);
    gloo::alltoall(opts);
  }

  // Gloo's TCP pair queues the sends and the receives of each slot (std::deques in
  // tcp::Pair) and writes a message only once its receiver asked for one, so the messages
  // between two ranks on one slot arrive in the order they were sent, into the receives in
  // the order they were posted: one slot does for every message.
  void runSend(const void *data, size_t count, int peer) override {
    auto buffer = context->createUnboundBuffer(const_cast<void *>(data), count * sizeof(float));
    buffer->send(peer, kPointToPointSlot);
    buffer->waitSend(context->getTimeout());
  }

  void runRecv(void *data, size_t count, int peer) override {
    auto buffer = context->createUnboundBuffer(data, count * sizeof(float));
    buffer->recv(peer, kPointToPointSlot);
    buffer->waitRecv(context->getTimeout());
  }

private:
  /// Above the slots Gloo's collectives take: a prefix byte of 1 to 8 at bit 56 and up
  /// (gloo/types.h), or the context's counter from 0 for the algorithm classes.
  static constexpr uint64_t kPointToPointSlot = uint64_t(1) << 62;

  /// Gloo's reduce-scatter is an algorithm object bound to one buffer when it is made (its
  /// peers' buffers are registered then): one per part size, reused, the latest few kept.
  struct ReduceScatter {
    size_t count = 0;
    std::vector<float> data;
    std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> algorithm;
  };
  static constexpr size_t kKeptReduceScatters = 4;

  ReduceScatter &reduceScatterOf(size_t count) {
    for (ReduceScatter &rs : reduceScatters)
      if (rs.count == count)
        return rs;
    // Every rank makes them in the same order (the same program, the same shapes), which
    // is what pairs their slots.
    if (reduceScatters.size() == kKeptReduceScatters)
      reduceScatters.erase(reduceScatters.begin());
    ReduceScatter &rs = reduceScatters.emplace_back();
    rs.count = count;
    rs.data.resize(count * world);
    rs.algorithm = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
        context, std::vector<float *>{rs.data.data()}, int(rs.data.size()),
        std::vector<int>(size_t(world), int(count)));
    return rs;
  }

  std::shared_ptr<gloo::Context> context;
  std::vector<ReduceScatter> reduceScatters;
};

/// Where the ranks are: the hosts in the order of their first rank, each host's ranks.
struct Topology {
  std::vector<std::string> hosts;
  std::vector<std::vector<int>> ranksOf; // per host, ascending
  std::vector<int> hostOf;               // per rank

  static Topology of(const std::vector<std::optional<Claim>> &claims) {
    Topology t;
    std::map<std::string, int> index;
    for (size_t r = 0; r < claims.size(); ++r) {
      std::string host = claims[r] ? claims[r]->host : "?" + std::to_string(r);
      auto [it, added] = index.try_emplace(host, int(t.hosts.size()));
      if (added) {
        t.hosts.push_back(host);
        t.ranksOf.emplace_back();
      }
      t.ranksOf[size_t(it->second)].push_back(int(r));
      t.hostOf.push_back(it->second);
    }
    return t;
  }

  /// Whether each host's ranks follow one another (node-major, as torchrun and tpc launch
  /// number them): a gather of the hosts' blocks in host order is then in rank order.
  bool contiguous() const {
    int next = 0;
    for (const std::vector<int> &ranks : ranksOf)
      for (int r : ranks)
        if (r != next++)
          return false;
    return true;
  }
};

/// The hierarchy over several hosts (NCCL's between nodes, on CPUs): an all-reduce sums inside
/// each host through shared memory, the hosts' sums are summed over TCP among one rank a host
/// (the host's first, on a TcpMeshCommunicator), and the result is spread inside each host; a
/// gather likewise, a host's block at a time. Every rank ends with the same bits. All-to-all,
/// which the hierarchy does not shorten, and the messages between two ranks go over Gloo's
/// mesh of the whole group; with one rank a host, the TCP mesh is the whole group and takes
/// every call.
class HostsCommunicator : public Communicator {
public:
  HostsCommunicator(int rank, int world, const Topology &topology,
                    std::unique_ptr<ShmCommunicator> local,
                    std::unique_ptr<Communicator> between, Communicator &all)
      : Communicator(rank, world, sizeof(float)), topology(topology), local(std::move(local)),
        between(std::move(between)), all(all), host(topology.hostOf[size_t(rank)]),
        anyShared(std::any_of(topology.ranksOf.begin(), topology.ranksOf.end(),
                              [](const std::vector<int> &r) { return r.size() > 1; })) {}
  bool gathersVariableSizes() const override { return true; }
  std::string pathOf(const std::string &kind) const override {
    return kind == "all_to_all" || kind == "send" || kind == "recv" || !anyShared ? "tcp"
                                                                                  : "shm+tcp";
  }
  ShmCommunicator *segment() const { return local.get(); }

protected:
  void runAllReduce(void *data, size_t count) override {
    if (local)
      local->allReduce(data, count);
    if (between)
      between->allReduce(data, count);
    if (local)
      local->broadcast(data, count, 0);
  }

  void runAllGather(const void *in, size_t count, void *out) override {
    runAllGatherV(in, std::vector<size_t>(size_t(world), count), out);
  }

  void runAllGatherV(const void *in, const std::vector<size_t> &counts, void *out) override {
    const std::vector<int> &mine = topology.ranksOf[size_t(host)];
    std::vector<size_t> localCounts, blocks;
    for (int r : mine)
      localCounts.push_back(counts[size_t(r)]);
    size_t block = 0, total = 0;
    for (size_t c : localCounts)
      block += c;
    for (const std::vector<int> &ranks : topology.ranksOf) {
      size_t b = 0;
      for (int r : ranks)
        b += counts[size_t(r)];
      blocks.push_back(b);
      total += b;
    }
    // This host's block, where it lands in the whole (hosts in rank order).
    size_t offset = 0;
    for (int h = 0; h < host; ++h)
      offset += blocks[size_t(h)];
    float *y = static_cast<float *>(out);
    if (local)
      local->allGatherV(in, localCounts, y + offset);
    else
      std::memcpy(y + offset, in, block * sizeof(float));
    if (between) {
      staging.assign(y + offset, y + offset + block);
      between->allGatherV(staging.data(), blocks, y);
    }
    if (local)
      local->broadcast(y, total, 0);
  }

  void runReduceScatter(const void *in, size_t count, void *out) override {
    if (!anyShared) { // one rank a host: the mesh is the group, member r rank r
      between->reduceScatter(in, count, out);
      return;
    }
    staging.assign(static_cast<const float *>(in),
                   static_cast<const float *>(in) + count * size_t(world));
    runAllReduce(staging.data(), staging.size());
    std::memcpy(out, staging.data() + size_t(rank) * count, count * sizeof(float));
  }

  void runAllToAll(const void *in, size_t count, void *out) override {
    if (!anyShared)
      between->allToAll(in, count, out);
    else
      all.allToAll(in, count, out);
  }

  void runSend(const void *data, size_t count, int peer) override {
    (anyShared ? all : *between).send(data, count, peer);
  }

  void runRecv(void *data, size_t count, int peer) override {
    (anyShared ? all : *between).recv(data, count, peer);
  }

private:
  Topology topology;
  std::unique_ptr<ShmCommunicator> local;    // this host's ranks; none where it has one
  std::unique_ptr<Communicator> between; // the hosts' first ranks' TCP mesh; on those only
  Communicator &all;
  int host;
  bool anyShared; // some host has several ranks (else this is the TCP mesh alone)
  std::vector<float> staging;
};

/// A group connected through Gloo: the ranks that met through `meeting`, or a part of such a
/// group (split). A part meets under a prefix of its parent's store, over the same device, and
/// asks the parent, which outlives it, about lost peers.
class GlooComm : public ConnectedGroup {
public:
  GlooComm(const CommOptions &options, std::shared_ptr<Rendezvous> meeting,
           std::shared_ptr<gloo::transport::Device> device,
           std::shared_ptr<gloo::rendezvous::Context> context, std::string transport)
      : ConnectedGroup(options), meeting(std::move(meeting)), device(std::move(device)),
        context(context), gloo(context), transport(std::move(transport)) {
    for (int r = 0; r < options.world; ++r)
      members.push_back(r);
  }

  void broadcast(void *data, size_t bytes, int root) override {
    gloo::BroadcastOptions opts(context);
    opts.setOutput(static_cast<uint8_t *>(data), bytes);
    opts.setRoot(root);
    gloo::broadcast(opts);
  }

  void barrier() override {
    gloo::BarrierOptions opts(context);
    gloo::barrier(opts);
  }

  void retire() override {
    if (parent)
      parent->retire();
    else
      meeting->retire();
  }

  void recordExit(const std::string &reason) const override {
    ConnectedGroup::recordExit(reason);
    if (parent)
      parent->recordExit(reason);
    else
      meeting->recordExit(options.rank, reason);
  }

  std::string lostPeers() const override {
    if (parent) // names the peers by their rank in the group that met
      return parent->lostPeers();
    std::string lost;
    // A killed peer's sockets close a moment before its process is reaped: look for a second.
    for (int attempt = 0; attempt < 20 && lost.empty(); ++attempt) {
      if (attempt)
        ::usleep(50000);
      lost = meeting->lostPeers(options);
    }
    return lost.empty() ? Comm::lostPeers() : lost;
  }

  std::unique_ptr<Comm> split(int color, int key, std::string &error) override {
    try {
      // Every rank's color and key, from which each finds its part's ranks and their order.
      int32_t mine[2] = {color, key};
      std::vector<int32_t> all(2 * size_t(options.world));
      gloo::AllgatherOptions opts(context);
      opts.setInput(mine, 2);
      opts.setOutput(all.data(), all.size());
      gloo::allgather(opts);
      std::vector<int> part;
      for (int r = 0; r < options.world; ++r)
        if (all[2 * size_t(r)] == color)
          part.push_back(r);
      std::stable_sort(part.begin(), part.end(), [&](int a, int b) {
        return all[2 * size_t(a) + 1] < all[2 * size_t(b) + 1];
      });
      CommOptions partOptions = options;
      partOptions.rank = int(std::find(part.begin(), part.end(), options.rank) - part.begin());
      partOptions.world = int(part.size());
      // Every rank counts the splits alike, since each is collective: the count keeps a later
      // split's keys apart from an earlier one's, the color those of parts made at once.
      std::string prefix = "tpc/split/" + std::to_string(++splits) + "/" + std::to_string(color);
      if (part.size() == 1)
        return groupOfOne(partOptions);
      auto partStore = std::make_unique<gloo::rendezvous::PrefixStore>(prefix, store());
      auto partContext =
          std::make_shared<gloo::rendezvous::Context>(partOptions.rank, partOptions.world);
      partContext->setTimeout(std::chrono::seconds(options.timeoutSeconds));
      partContext->connectFullMesh(*partStore, device);
      std::unique_ptr<GlooComm> group(new GlooComm(partOptions, *this, part, std::move(partStore),
                                                   partContext));
      // As connectGloo does: no rank leaves before every peer has finished connecting.
      group->barrier();
      if (!group->chooseTransport(error))
        return nullptr;
      return group;
    } catch (const std::exception &e) {
      error = "could not connect the ranks of color " + std::to_string(color) + ": " + e.what();
      return nullptr;
    }
  }

  /// The collectives through shared memory where every rank is on this host, the hierarchy
  /// where they are on several (TPC_TRANSPORT auto, the default, or shm on one host); Gloo's
  /// TCP between every pair otherwise (TPC_TRANSPORT=gloo, or ranks of a host that are not
  /// numbered one after another). False, with `error`, where shm was asked for and cannot be
  /// had.
  bool chooseTransport(std::string &error) {
    if (!parent)
      meeting->readClaims(options.world);
    std::vector<std::optional<Claim>> claims;
    for (int r : members)
      claims.push_back(meeting->claims()[size_t(r)]);
    Topology topology = Topology::of(claims);
    if (transport == "gloo")
      return true;
    auto gone = [this] { return peersGoneHere(); };
    if (topology.hosts.size() == 1 || transport == "shm") {
      if (!shareMemory(transport, topology.hosts.size() == 1,
                       "the ranks that met through " + meeting->where() + " are on " +
                           std::to_string(topology.hosts.size()) + " hosts",
                       "tpc", gone, error))
        return false;
      if (shm)
        shm->nameRanks(members);
      return true;
    }
    if (!topology.contiguous())
      return true;
    return spanHosts(topology);
  }

protected:
  Communicator &own() override { return gloo; }

private:
  /// A part of `parent`: its rank r is the parent's `part[r]`.
  GlooComm(const CommOptions &options, GlooComm &parent, const std::vector<int> &part,
           std::unique_ptr<gloo::rendezvous::Store> partStore,
           std::shared_ptr<gloo::rendezvous::Context> context)
      : ConnectedGroup(options), meeting(parent.meeting), device(parent.device),
        context(context), gloo(context), transport(parent.transport), parent(&parent),
        ownStore(std::move(partStore)) {
    for (int r : part)
      members.push_back(parent.members[size_t(r)]);
  }

  /// Where this group's ranks meet: the rendezvous's store, or a part's prefix of it.
  gloo::rendezvous::Store &store() { return ownStore ? *ownStore : meeting->store(); }

  /// The peers on this host whose process has ended, "" while all may answer.
  std::string peersGoneHere() const {
    std::string here = thisHost(), lost;
    const auto &claims = meeting->claims();
    for (int r : members) {
      const std::optional<Claim> &claim = claims[size_t(r)];
      if (r != members[size_t(options.rank)] && claim && claim->host == here &&
          processEnded(claim->pid))
        lost += (lost.empty() ? "lost rank " : ", rank ") + std::to_string(r) + " (process " +
                std::to_string(claim->pid) + " is gone)";
    }
    return lost;
  }

  /// The hierarchy: a segment for each host of several ranks (its first rank makes it and
  /// names it in the store), the TCP mesh among the hosts' first ranks. Every rank decides the
  /// same: where any rank could not have its part, the group stays on Gloo's TCP.
  bool spanHosts(const Topology &topology) {
    int host = topology.hostOf[size_t(options.rank)];
    const std::vector<int> &mine = topology.ranksOf[size_t(host)];
    int localRank = int(std::find(mine.begin(), mine.end(), options.rank) - mine.begin());
    bool first = localRank == 0;
    std::string key = "tpc/shm/" + std::to_string(host), name;
    std::unique_ptr<ShmCommunicator> local;
    std::unique_ptr<Communicator> between;
    bool ok = true;
    try {
      if (mine.size() > 1) {
        std::string why;
        // A rank of this host waits on its first rank, which waits on the other hosts for
        // up to --timeout: it waits longer, to hear why that one stopped.
        int wait = options.timeoutSeconds + 5;
        auto gone = [this] { return peersGoneHere(); };
        if (first) {
          char text[64];
          std::snprintf(text, sizeof text, "/tpc-h%d-%ld-%lx", host, long(::getpid()),
                        (unsigned long)std::chrono::steady_clock::now().time_since_epoch().count());
          local = ShmCommunicator::open(text, 0, int(mine.size()), wait, gone, why);
          name = local ? text : "";
          store().set(key, std::vector<char>(name.begin(), name.end()));
        } else {
          std::vector<char> got = store().get(key);
          name.assign(got.begin(), got.end());
          if (!name.empty())
            local = ShmCommunicator::open(name, localRank, int(mine.size()), wait, gone, why);
        }
        if (local) {
          std::vector<int> names;
          for (int r : mine)
            names.push_back(members[size_t(r)]);
          local->nameRanks(std::move(names));
        }
        ok = local != nullptr;
      }
      if (first) {
        std::vector<std::string> names;
        for (size_t h = 0; h < topology.hosts.size(); ++h)
          names.push_back("rank " + std::to_string(members[size_t(topology.ranksOf[h].front())]) +
                          " (" + topology.hosts[h] + ")");
        std::string why;
        between = TcpMeshCommunicator::connect(store(), "tpc/hosts", host,
                                               int(topology.hosts.size()), meeting->address(),
                                               options.timeoutSeconds, std::move(names), why);
        ok = ok && between != nullptr;
      }
    } catch (const std::exception &) {
      ok = false;
    }
    float failed = ok ? 0.0f : 1.0f;
    gloo.allReduce(&failed, 1);
    if (first && !name.empty()) // every rank of this host has mapped it, or given up
      ::shm_unlink(name.c_str());
    if (failed > 0)
      return true;
    auto hosts = std::make_unique<HostsCommunicator>(options.rank, options.world, topology,
                                                     std::move(local), std::move(between), gloo);
    shm = hosts->segment();
    chosen = std::move(hosts);
    return true;
  }

  std::shared_ptr<Rendezvous> meeting;
  std::shared_ptr<gloo::transport::Device> device;
  std::shared_ptr<gloo::rendezvous::Context> context;
  GlooCommunicator gloo;
  std::string transport; // TPC_TRANSPORT: a part chooses by it as its parent did
  std::vector<int> members; // this group's ranks as the rendezvous numbers them
  GlooComm *parent = nullptr;
  std::unique_ptr<gloo::rendezvous::Store> ownStore; // a part's prefix of its parent's store
  int splits = 0;
};

} // namespace

std::unique_ptr<Comm> connectGloo(const CommOptions &options, const std::string &transport,
                                  std::string &error) {
  std::shared_ptr<Rendezvous> meeting = Rendezvous::join(options, error);
  if (!meeting)
    return nullptr;
  Rendezvous &place = *meeting; // outlives the group made of it, here
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = place.address();
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world);
    context->setTimeout(std::chrono::seconds(options.timeoutSeconds));
    context->connectFullMesh(place.store(), device);
    auto comm = std::make_unique<GlooComm>(options, meeting, device, context, transport);
    // A rank that returned from connecting could otherwise exit (on a bad checkpoint, say)
    // while a peer is still finishing the handshake, and the peer would report a confusing
    // connection error rather than the failure that follows.
    comm->barrier();
    // Every rank decides the same: chooseTransport's own collectives keep them together.
    if (!comm->chooseTransport(error))
      return nullptr;
    return comm;
  } catch (const std::exception &e) {
    // Gloo says which store key it waited for; the claims say which rank that is.
    std::vector<std::string> absent;
    for (int r = 0; r < options.world; ++r)
      if (!place.claimOf(r))
        absent.push_back(std::to_string(r));
    if (!absent.empty())
      error = "the rendezvous through " + place.where() + " timed out after " +
              std::to_string(options.timeoutSeconds) + " s: rank" +
              (absent.size() > 1 ? "s " : " ") + joinList(absent, ", ") +
              " never joined (not started, or given another rendezvous)" +
              place.refusals();
    else
      error = std::string("could not connect the ranks: ") + e.what();
    return nullptr;
  }
}

} // namespace tpcrt
