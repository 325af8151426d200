# A Salt state doing what contrib/ansible's role does (an example, not run by the tests: the role is).
# Pillar:
#   hermes_keeper:
#     user: hermes                 # the user Hermes runs as
#     home: /home/hermes/.hermes
#     package: hermes-keeper       # what pipx installs (a name, a path, a wheel, a git URL)
#     via: systemd                 # hermes | systemd | cron
#     at: "03:30"
#     config: {retention: {default: 30d, cron: 3d}}
{% set k = salt['pillar.get']('hermes_keeper', {}) %}
{% set user = k.get('user', 'hermes') %}
{% set home = k.get('home', '/home/' ~ user ~ '/.hermes') %}
{% set keeper = '/home/' ~ user ~ '/.local/bin/hermes-keeper' %}

hermes-keeper-installed:
  cmd.run:
    - name: pipx install {{ k.get('package', 'hermes-keeper') }}
    - runas: {{ user }}
    - creates: {{ keeper }}

{% if k.get('config') %}
hermes-keeper-config:
  file.managed:
    - name: {{ home }}/keeper.toml
    - user: {{ user }}
    - mode: '0600'
    - contents: |
        {%- for section, keys in k['config'] | dictsort %}
        [{{ section }}]
        {%- for key, value in keys | dictsort %}
        {{ key }} = {{ value | json }}
        {%- endfor %}
        {%- endfor %}
    - check_cmd: {{ keeper }} config show --home {{ home }} --config
    - require:
      - cmd: hermes-keeper-installed
{% endif %}

hermes-keeper-adopted:  # idempotent: says 'nothing to change' once adopted
  cmd.run:
    - name: {{ keeper }} adopt --yes --all-profiles --home {{ home }}
    - runas: {{ user }}
    - require:
      - cmd: hermes-keeper-installed

hermes-keeper-scheduled:
  cmd.run:
    - name: {{ keeper }} schedule install --via {{ k.get('via', 'systemd') }} --at {{ k.get('at', '03:30') }} --all-profiles --home {{ home }}
    - runas: {{ user }}
    - require:
      - cmd: hermes-keeper-adopted
