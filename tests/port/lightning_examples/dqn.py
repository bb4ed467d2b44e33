"""A deep Q-network on a cart-pole, in the style of Lightning's
``examples/pytorch/domain_templates/reinforce_learn_Qnet.py``: a replay buffer read through an
IterableDataset (no length), an agent that plays one environment step per training step with an
epsilon-greedy policy, a target network synced every few steps, the old dict return with ``log``
and ``progress_bar`` extras. The environment is a small cart-pole written here (gym is not a
dependency), with gym's old API: ``reset() -> state``, ``step(a) -> (state, reward, done, info)``."""
import math
import random
from collections import OrderedDict, deque, namedtuple
from collections.abc import Iterator

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader
from torch.utils.data.dataset import IterableDataset

from lightning.pytorch import LightningModule, Trainer, seed_everything


class Discrete:
    def __init__(self, n: int) -> None:
        self.n = n

    def sample(self) -> int:
        return random.randrange(self.n)


class Box:
    def __init__(self, size: int) -> None:
        self.shape = (size,)


class CartPole:
    """Cart-pole balancing (the classic control problem's equations, Euler steps of 0.02 s)."""

    def __init__(self) -> None:
        self.action_space, self.observation_space = Discrete(2), Box(4)
        self.state = [0.0, 0.0, 0.0, 0.0]

    def reset(self) -> list:
        self.state = [random.uniform(-0.05, 0.05) for _ in range(4)]
        return list(self.state)

    def step(self, action: int) -> tuple:
        x, x_dot, theta, theta_dot = self.state
        force = 10.0 if action == 1 else -10.0
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + 0.05 * theta_dot**2 * sin) / 1.1
        theta_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos**2 / 1.1))
        x_acc = temp - 0.05 * theta_acc * cos / 1.1
        self.state = [x + 0.02 * x_dot, x_dot + 0.02 * x_acc, theta + 0.02 * theta_dot, theta_dot + 0.02 * theta_acc]
        done = abs(self.state[0]) > 2.4 or abs(self.state[2]) > 12 * 2 * math.pi / 360
        return list(self.state), 1.0, done, {}


class DQN(nn.Module):
    def __init__(self, obs_size: int, n_actions: int, hidden_size: int = 32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(obs_size, hidden_size), nn.ReLU(), nn.Linear(hidden_size, n_actions))

    def forward(self, x):
        return self.net(x.float())


Experience = namedtuple("Experience", field_names=["state", "action", "reward", "done", "new_state"])


class ReplayBuffer:
    def __init__(self, capacity: int) -> None:
        self.buffer = deque(maxlen=capacity)

    def __len__(self) -> int:
        return len(self.buffer)

    def append(self, experience: Experience) -> None:
        self.buffer.append(experience)

    def sample(self, batch_size: int) -> tuple:
        indices = random.sample(range(len(self.buffer)), batch_size)
        states, actions, rewards, dones, next_states = zip(*(self.buffer[idx] for idx in indices))
        return (
            torch.tensor(states),
            torch.tensor(actions),
            torch.tensor(rewards, dtype=torch.float32),
            torch.tensor(dones, dtype=torch.bool),
            torch.tensor(next_states),
        )


class RLDataset(IterableDataset):
    def __init__(self, buffer: ReplayBuffer, sample_size: int = 200) -> None:
        self.buffer = buffer
        self.sample_size = sample_size

    def __iter__(self) -> Iterator:
        states, actions, rewards, dones, new_states = self.buffer.sample(self.sample_size)
        for i in range(len(dones)):
            yield states[i], actions[i], rewards[i], dones[i], new_states[i]


class Agent:
    def __init__(self, env, replay_buffer: ReplayBuffer) -> None:
        self.env = env
        self.replay_buffer = replay_buffer
        self.state = self.env.reset()

    def reset(self) -> None:
        self.state = self.env.reset()

    def get_action(self, net: nn.Module, epsilon: float, device: str) -> int:
        if random.random() < epsilon:
            return self.env.action_space.sample()
        state = torch.tensor([self.state])
        if device not in ["cpu"]:
            state = state.cuda(device)
        _, action = torch.max(net(state), dim=1)
        return int(action.item())

    @torch.no_grad()
    def play_step(self, net: nn.Module, epsilon: float = 0.0, device: str = "cpu") -> tuple:
        action = self.get_action(net, epsilon, device)
        new_state, reward, done, _ = self.env.step(action)
        self.replay_buffer.append(Experience(self.state, action, reward, done, new_state))
        self.state = new_state
        if done:
            self.reset()
        return reward, done


class DQNLightning(LightningModule):
    def __init__(self, replay_size: int = 200, warm_start_steps: int = 200, gamma: float = 0.99,
                 eps_start: float = 1.0, eps_end: float = 0.01, eps_last_frame: int = 100, sync_rate: int = 10,
                 lr: float = 1e-2, episode_length: int = 40, batch_size: int = 8) -> None:
        super().__init__()
        self.replay_size, self.warm_start_steps, self.gamma = replay_size, warm_start_steps, gamma
        self.eps_start, self.eps_end, self.eps_last_frame = eps_start, eps_end, eps_last_frame
        self.sync_rate, self.lr, self.episode_length, self.batch_size = sync_rate, lr, episode_length, batch_size

        self.env = CartPole()
        obs_size = self.env.observation_space.shape[0]
        n_actions = self.env.action_space.n
        self.net = DQN(obs_size, n_actions)
        self.target_net = DQN(obs_size, n_actions)

        self.buffer = ReplayBuffer(self.replay_size)
        self.agent = Agent(self.env, self.buffer)
        self.total_reward = 0
        self.episode_reward = 0
        self.populate(self.warm_start_steps)

    def populate(self, steps: int = 1000) -> None:
        for _ in range(steps):
            self.agent.play_step(self.net, epsilon=1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def dqn_mse_loss(self, batch) -> torch.Tensor:
        states, actions, rewards, dones, next_states = batch
        state_action_values = self.net(states).gather(1, actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_state_values = self.target_net(next_states).max(1)[0]
            next_state_values[dones] = 0.0
            next_state_values = next_state_values.detach()
        expected_state_action_values = next_state_values * self.gamma + rewards
        return nn.MSELoss()(state_action_values, expected_state_action_values)

    def training_step(self, batch, nb_batch) -> OrderedDict:
        device = self.get_device(batch)
        epsilon = max(self.eps_end, self.eps_start - (self.global_step + 1) / self.eps_last_frame)
        reward, done = self.agent.play_step(self.net, epsilon, device)
        self.episode_reward += reward
        loss = self.dqn_mse_loss(batch)
        if done:
            self.total_reward = self.episode_reward
            self.episode_reward = 0
        if self.global_step % self.sync_rate == 0:
            self.target_net.load_state_dict(self.net.state_dict())
        log = {
            "total_reward": torch.tensor(self.total_reward).to(device),
            "reward": torch.tensor(reward).to(device),
            "steps": torch.tensor(self.global_step).to(device),
        }
        self.log("total_reward", float(self.total_reward), prog_bar=True)
        return OrderedDict({"loss": loss, "log": log, "progress_bar": log})

    def configure_optimizers(self):
        return [optim.Adam(self.net.parameters(), lr=self.lr)]

    def __dataloader(self) -> DataLoader:
        dataset = RLDataset(self.buffer, self.episode_length)
        return DataLoader(dataset=dataset, batch_size=self.batch_size, sampler=None)

    def train_dataloader(self) -> DataLoader:
        return self.__dataloader()

    def get_device(self, batch) -> str:
        return batch[0].device.index if self.on_gpu else "cpu"


def main(root_dir, **trainer_kwargs):
    seed_everything(0)
    model = DQNLightning()
    trainer = Trainer(accelerator="cpu", default_root_dir=root_dir, val_check_interval=100, max_epochs=4,
                      log_every_n_steps=5, **trainer_kwargs)
    trainer.fit(model)
    return model, trainer
