"""Chat templates in the formats of the families the converter takes, written for these tests
(not copied from any model): each uses the Jinja constructs real templates use (bos_token,
trim, namespace, loop variables, raise_exception, strftime_now, tojson, tools, a template
variable, {% generation %}), so that rendering them as transformers does is shown on each."""

CHATML = (  # Qwen2.5, SmolLM2: a default system message, tools as JSON
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- 'Tools:' }}{%- for tool in tools %}{{- '\\n' + tool | tojson }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) "
    "or message.role == 'assistant' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN3 = (  # a namespace over the messages, the enable_thinking variable
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for m in messages %}{%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and loop.index0 > ns.last_user %}"
    "{{- '<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n' + message.content }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
LLAMA3 = (  # bos_token, today's date, a trimmed system message
    "{{- bos_token }}"
    "{%- if not date_string is defined %}{%- set date_string = strftime_now('%d %b %Y') %}"
    "{%- endif %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content'] | trim %}"
    "{%- set messages = messages[1:] %}{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' + system_message + '<|eot_id|>' }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{{- message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
GEMMA = (  # strict alternation (raise_exception), the system text in the first user turn
    "{{ bos_token }}"
    "{% if messages[0]['role'] == 'system' %}"
    "{% set prefix = messages[0]['content'] + '\\n\\n' %}{% set loop_messages = messages[1:] %}"
    "{% else %}{% set prefix = '' %}{% set loop_messages = messages %}{% endif %}"
    "{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/...') }}"
    "{% endif %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + (prefix if loop.first else '') }}"
    "{{ message['content'] | trim }}{{ '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
PHI3 = """\
{# role tags, eos_token when no reply is asked for, {% generation %}; written over several
   indented lines, as real templates are: trim_blocks and lstrip_blocks decide their output #}
{% for message in messages %}
    {% if message['role'] == 'assistant' %}
        {{- '<|assistant|>\n' }}
        {% generation %}
{{ message['content'] + '<|end|>' }}
        {% endgeneration %}
    {% else %}
        {{- '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' -}}
    {% endif %}
{% endfor %}
{% if add_generation_prompt %}
{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}
{% endif %}
"""
MISTRAL = (  # [INST] turns, only user and assistant roles
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
    "{% endif %}{% endfor %}"
)
TEMPLATES = {"chatml": CHATML, "qwen3": QWEN3, "llama3": LLAMA3, "gemma": GEMMA, "phi3": PHI3,
             "mistral": MISTRAL}  # fmt: skip
SPECIALS = ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<|start_header_id|>",
            "<|end_header_id|>", "<|eot_id|>", "<start_of_turn>", "<end_of_turn>", "<|user|>",
            "<|assistant|>", "<|system|>", "<|end|>", "<think>", "</think>"]  # fmt: skip

# templates whose work or memory inside one line is unbounded without the render's bounds
# (issue 63: the first took 130 s and 3.4 GB per render in Python, list doubling 3.2 GB in 40
# steps; JS had no bound on nested loops): every runtime refuses each in bounded time and memory
UNBOUNDED_RENDERS = {
    "list times 300, sorted": "{{ ((range(100000)|list) * 300)|sort|unique|list|length }}",
    "list doubling": "{% set ns = namespace(x=[1]) %}{% for i in range(40) %}"
    "{% set ns.x = ns.x + ns.x %}{% endfor %}{{ ns.x|length }}",
    "string doubling": "{% set ns = namespace(x='ab') %}{% for i in range(40) %}"
    "{% set ns.x = ns.x ~ ns.x %}{% endfor %}{{ ns.x|length }}",
    "nested loops": "{% for i in range(100000) %}{% for j in range(100000) %}"
    "{% for k in range(100000) %}{% endfor %}{% endfor %}{% endfor %}",
    "search in a loop": "{% set l = range(100000)|list %}{% for i in range(100000) %}"
    "{% if -1 in l %}x{% endif %}{% endfor %}",
    "sorting in a loop": "{% for i in range(1000) %}{{ (range(100000)|list)|sort|length }}"
    "{% endfor %}",
    "wide center": "{{ 'a'|center(999999999)|length }}",
    "huge join": "{{ (range(100000)|list)|join('x' * 1000000)|length }}",
}
