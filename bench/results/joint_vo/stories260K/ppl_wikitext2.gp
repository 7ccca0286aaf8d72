set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/joint_vo/stories260K/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'stories260K'
plot 122.33439836358576 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
20 116.67827456330289
40 131.74707949556827
e
